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
	for _, backend := range sim.Backends {
		for _, sc := range sim.Scenarios {
			t.Run(backend+"/"+sc, func(t *testing.T) {
				t.Parallel()
				deterministic(t, sim.Config{Scenario: sc, Backend: backend, Duration: 5 * time.Second, Seed: 7})
			})
		}
	}
}

func deterministic(t *testing.T, cfg sim.Config) {
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
}

// TestGossipOvershootGrowsWithInterval checks the simulator's gossip
// network against what the accuracy model predicts: the longer the sync
// interval, the more the worst window overshoots. It stops at half the
// window: from there on a capped lease waits a whole interval for its
// refill, and false rejection, not overshoot, is what grows (docs/tuning.md).
func TestGossipOvershootGrowsWithInterval(t *testing.T) {
	t.Parallel()
	last := -1.0
	for _, iv := range []time.Duration{25 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond} {
		r, err := sim.Run(sim.Config{Backend: "gossip", Interval: iv, Duration: 30 * time.Second})
		require.NoError(t, err)
		t.Logf("gossip, sync every %v: worst window %.2f%% over the limit, overshoot %.2f%%, false rejection %.2f%%", iv, r.OvershootWorst, r.Overshoot, r.FalseRejection)
		assert.Greater(t, r.OvershootWorst, last, "at %v", iv)
		// Measured 1.15%, 1.75% and 3.90%; with no gossip delivered at
		// all, every node spends its whole share alone: about 105%.
		assert.Less(t, r.OvershootWorst, 10.0, "at %v: the peers' counts arrive", iv)
		last = r.OvershootWorst
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
		"Scenario":   {Scenario: "nope"},
		"Nodes":      {Nodes: -1},
		"Rate":       {Rate: -5},
		"Limit":      {Limit: -1},
		"Interval":   {Interval: time.Microsecond},
		"Window":     {Window: -time.Second},
		"Algorithm":  {Algorithm: local.SlidingLog},
		"Shares":     {Shares: 9},
		"Backend":    {Backend: "etcd"},
		"GossipLoss": {GossipLoss: 1},
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
