package sim_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/sim"
)

// TestDeterministic runs every scenario twice with one seed and compares
// the JSON byte for byte, and once with another seed, which must differ.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	for _, sc := range sim.Scenarios {
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			cfg := sim.Config{Scenario: sc, Duration: 10 * time.Second, Seed: 7}
			var a, b, c bytes.Buffer
			for _, out := range []*bytes.Buffer{&a, &b} {
				r, err := sim.Run(cfg)
				require.NoError(t, err)
				require.NoError(t, r.WriteJSON(out))
			}
			assert.Equal(t, a.String(), b.String(), "one seed, one output")
			cfg.Seed = 8
			r, err := sim.Run(cfg)
			require.NoError(t, err)
			require.NoError(t, r.WriteJSON(&c))
			assert.NotEqual(t, a.String(), c.String(), "another seed, other arrivals")
		})
	}
}

// TestOneNodeIsIdeal checks that a fleet of one token bucket matches the
// ideal limiter fed the same arrivals within 0.5%. A sliding window falls
// short by more, in the simulator as against real Redis (hybrid's
// TestFleetAccuracy): its lease lapses at each window's edge, and a lease
// cut short by what the window has left asks for no early refill, so the
// node waits for its next regular sync. It is held to the same 90% here.
func TestOneNodeIsIdeal(t *testing.T) {
	t.Parallel()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		r, err := sim.Run(sim.Config{Nodes: 1, Algorithm: alg, Duration: 30 * time.Second})
		require.NoError(t, err)
		t.Logf("%v: admitted %d, ideal %d (%.2f%%), overshoot %.3f%%, false rejection %.3f%%",
			alg, r.Admitted, r.Ideal, 100*float64(r.Admitted)/float64(r.Ideal), r.Overshoot, r.FalseRejection)
		if alg == local.TokenBucket {
			assert.InEpsilon(t, r.Ideal, r.Admitted, 0.005, "within 0.5%% of the ideal")
		} else {
			assert.GreaterOrEqual(t, float64(r.Admitted), 0.9*float64(r.Ideal))
			assert.LessOrEqual(t, r.Admitted, r.Ideal)
		}
	}
}

// TestConfigErrors checks that a bad Config is refused, naming the field.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]sim.Config{
		"Scenario":  {Scenario: "nope"},
		"Nodes":     {Nodes: -1},
		"Rate":      {Rate: -5},
		"Limit":     {Limit: -1},
		"Interval":  {Interval: time.Microsecond},
		"Window":    {Window: -time.Second},
		"Algorithm": {Algorithm: local.SlidingLog},
		"Shares":    {Shares: 9},
	}
	for field, cfg := range tests {
		_, err := sim.Run(cfg)
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), "Config."+field, field)
	}
}

// BenchmarkSimSteady simulates a minute of 32 nodes offered 1,000
// requests per second each: about 1.9M decisions.
func BenchmarkSimSteady(b *testing.B) {
	decisions := int64(0)
	for b.Loop() {
		r, err := sim.Run(sim.Config{Nodes: 32, Rate: 1000, Duration: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		decisions += r.Offered
	}
	b.ReportMetric(float64(decisions)/b.Elapsed().Seconds(), "decisions/s")
}
