package sim_test

import (
	"bytes"
	"fmt"
	"runtime/debug"
	"strconv"
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
		require.NoError(t, sim.WriteJSON(out, r))
	}
	assert.Equal(t, a.String(), b.String(), "one seed, one output")
	cfg.Seed = 8
	r, err := sim.Run(cfg)
	require.NoError(t, err)
	require.NoError(t, sim.WriteJSON(&c, r))
	assert.NotEqual(t, a.String(), c.String(), "another seed, other arrivals")
}

// TestGossipOvershootGrowsWithInterval checks the simulator's gossip
// network against what the accuracy model predicts: syncing less often
// than 25 ms, the worst window overshoots more. Past 100 ms it need not
// grow further: from there on a capped lease waits a whole interval for
// its refill, and false rejection, not overshoot, is what grows
// (docs/tuning.md). The worst window is one window's luck, so each
// interval's is the mean over three seeds; between 100 ms and 500 ms it
// went either way seed by seed even on the kinder model before
// memberlist's per-peer transmit count (seed 5: 2.2% at 100 ms, 0.2% at
// 500 ms), and does on this one (seeds 1-5 at 100 ms: 3.6, 2.35, 3.05,
// 1.95, 3.05%; at 500 ms: 2.25, 5.0, 4.85, 1.4, 2.55%).
func TestGossipOvershootGrowsWithInterval(t *testing.T) {
	t.Parallel()
	var first float64
	for i, iv := range []time.Duration{25 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond} {
		var worst, over, falseRej float64
		for seed := uint64(1); seed <= 3; seed++ {
			r, err := sim.Run(sim.Config{Backend: "gossip", Interval: iv, Duration: 30 * time.Second, Seed: seed})
			require.NoError(t, err)
			worst, over, falseRej = worst+r.OvershootWorst/3, over+r.Overshoot/3, falseRej+r.FalseRejection/3
		}
		t.Logf("gossip, sync every %v: worst window %.2f%% over the limit, overshoot %.2f%%, false rejection %.2f%% (mean of 3 seeds)", iv, worst, over, falseRej)
		if i == 0 {
			first = worst
		} else {
			assert.Greater(t, worst, first, "at %v, against 25 ms", iv)
		}
		// Measured 1.00%, 3.00% and 4.03%; with no gossip delivered at
		// all, every node spends its whole share alone: about 105%.
		assert.Less(t, worst, 10.0, "at %v: the peers' counts arrive", iv)
	}
}

// TestOneNodeIsIdeal checks that a fleet of one matches the ideal limiter
// fed the same arrivals, over both backends: a token bucket within 0.4%
// (gossip was 0.45-0.52% short, its bucket refilled before its lease
// was charged: see settleBucket in gossip/grant.go),
// a sliding window at least 99% of the ideal and never above it. A
// sliding window's lease lapses at each window's edge; what the previous
// window's weight frees until then comes as a paced lease (see
// hybrid/slidinglease.go), without which one node admitted about 94% of
// the ideal.
func TestOneNodeIsIdeal(t *testing.T) {
	t.Parallel()
	for _, backend := range sim.Backends {
		for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
			r, err := sim.Run(sim.Config{Backend: backend, Nodes: 1, Algorithm: alg, Duration: 30 * time.Second})
			require.NoError(t, err)
			t.Logf("%s %v: admitted %d, ideal %d (%.2f%%), overshoot %.3f%%, false rejection %.3f%%",
				backend, alg, r.Admitted, r.Ideal, 100*float64(r.Admitted)/float64(r.Ideal), r.Overshoot, r.FalseRejection)
			if alg == local.TokenBucket {
				assert.InEpsilon(t, r.Ideal, r.Admitted, 0.004, "%s: within 0.4%% of the ideal", backend)
			} else {
				assert.GreaterOrEqual(t, float64(r.Admitted), 0.99*float64(r.Ideal), backend)
				assert.LessOrEqual(t, r.Admitted, r.Ideal, backend)
			}
		}
	}
}

// TestConfigErrors checks that a bad Config is refused, naming the field.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		cfg   sim.Config
	}{
		{"Scenario", sim.Config{Scenario: "nope"}},
		{"Nodes", sim.Config{Nodes: -1}},
		{"Rate", sim.Config{Rate: -5}},
		{"Limit", sim.Config{Limit: -1}},
		{"Interval", sim.Config{Interval: time.Microsecond}},
		{"Window", sim.Config{Window: -time.Second}},
		{"Algorithm", sim.Config{Algorithm: local.SlidingLog}},
		{"Shares", sim.Config{Shares: 9}},
		{"Backend", sim.Config{Backend: "etcd"}},
		{"GossipLoss", sim.Config{GossipLoss: 1}},
		{"Keys", sim.Config{Scenario: "zipf", Keys: -3}},
		{"Keys", sim.Config{Scenario: "zipf", Keys: 1}},
		{"Keys", sim.Config{Scenario: "hotkey", Keys: 20_000_000}},
		{"Keys", sim.Config{Scenario: "steady", Keys: 10}},
	}
	for _, tt := range tests {
		_, err := sim.Run(tt.cfg)
		require.Error(t, err, tt.field)
		assert.Contains(t, err.Error(), "Config."+tt.field, tt.field)
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

// TestUnderLimitIsARefusal checks the under-limit metric against what it
// must be at the edges: with a limit ten times what the fleet is offered,
// the ideal's bucket never falls below half, so every refusal is one; at
// twice the limit the ideal runs dry, so only some refusals are; and the
// figure is in the JSON under its name.
func TestUnderLimitIsARefusal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   sim.Config
		every bool // every refusal is under the limit
	}{
		{"far under the limit", sim.Config{Nodes: 4, Rate: 250, Limit: 10_000, RTT: 50 * time.Millisecond, Duration: 10 * time.Second}, true},
		{"twice the limit", sim.Config{Nodes: 4, Duration: 10 * time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := sim.Run(tt.cfg)
			require.NoError(t, err)
			refused := 100 * float64(r.Offered-r.Admitted) / float64(r.Offered)
			t.Logf("%s: refused %.3f%% of the requests, %.3f%% under the limit", tt.name, refused, r.UnderLimit)
			assert.GreaterOrEqual(t, r.UnderLimit, 0.0)
			if tt.every {
				assert.InDelta(t, refused, r.UnderLimit, 0.001, "every refusal is under the limit")
			} else {
				assert.Less(t, r.UnderLimit, refused, "the ideal refuses too: not every refusal is under the limit")
			}
			var b bytes.Buffer
			require.NoError(t, sim.WriteJSON(&b, r))
			assert.Contains(t, b.String(), `"under_limit_refusal_pct"`)
			b.Reset()
			require.NoError(t, r.WriteTable(&b))
			assert.Contains(t, b.String(), "under-limit refusals")
		})
	}
}

// TestUnderLimitScenarios prints the under-limit refusals of the
// scenarios the accuracy targets name (docs/tuning.md), and of four with
// sliding windows, on both backends, 8 nodes, 100 ms syncs, the default
// seed. The target is at most 0.01%, which both backends now meet in
// every one of the first five
// (before the new key's first sync came at once in the simulator, and
// before gossip gave slack on a node's first sync of a key, 0.005-0.108%).
// make test runs it without the race detector.
// Reproduce: go test -run TestUnderLimitScenarios -v ./sim/
func TestUnderLimitScenarios(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("eighteen minute-long simulations")
	}
	if raceEnabled() {
		// Under the race detector zipf over gossip alone takes minutes;
		// TestDeterministic runs every scenario under it already.
		t.Skip("eighteen minute-long simulations: too slow under -race")
	}
	type row struct {
		scenario string
		alg      local.Algorithm
		most     float64 // under-limit refusals allowed, % of the requests
	}
	rows := []row{
		{"steady", local.TokenBucket, 0.01}, {"zipf", local.TokenBucket, 0.01}, {"hotkey", local.TokenBucket, 0.01},
		{"bursts", local.TokenBucket, 0.01}, {"churn", local.TokenBucket, 0.01},
		// A sliding window's lease lapses at its window's edge: keys far
		// under their limits refused their first requests past it until
		// the next sync, 3.2% of zipf's requests (gossip 3.1%) and 2.2%
		// of hotkey's, before the edge credit (hybrid's edgecredit.go).
		{"zipf", local.SlidingWindow, 0.01}, {"hotkey", local.SlidingWindow, 0.01},
		{"steady", local.SlidingWindow, 0.01}, {"bursts", local.SlidingWindow, 0.05},
	}
	for _, backend := range sim.Backends {
		for _, tt := range rows {
			t.Run(fmt.Sprintf("%s/%s/%v", backend, tt.scenario, tt.alg), func(t *testing.T) {
				t.Parallel()
				r, err := sim.Run(sim.Config{Scenario: tt.scenario, Backend: backend, Nodes: 8, Interval: 100 * time.Millisecond, Algorithm: tt.alg})
				require.NoError(t, err)
				t.Logf("%-6s %-6s %v under-limit refusals %7.3f%%, false rejection %7.3f%%, worst window %+7.3f%%, admitted %.2f%% of the ideal",
					backend, tt.scenario, tt.alg, r.UnderLimit, r.FalseRejection, r.OvershootWorst, 100*float64(r.Admitted)/float64(max(1, r.Ideal)))
				assert.GreaterOrEqual(t, r.UnderLimit, 0.0)
				assert.LessOrEqual(t, r.UnderLimit, tt.most, "under-limit refusals, % of the requests")
			})
		}
	}
}

// raceEnabled reports whether the test binary was built with -race, as
// its build settings record.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// TestLongInterval holds a sync interval twice the window (8 nodes at
// twice the limit, 30 s) to the targets: no window more than 10%
// over the ideal, false rejection at most 5%, over Redis; over gossip,
// steady and a hot key too, skewed within 12% (8.35% at this seed, over
// the default minute 8.4-9.9% on five), and bursts within 6% refused (5.1% over these 30 s; over the
// simulator's default minute 4.8%, five seeds 3.7-5.7%, and 5.6-7.5%
// before a node weighed itself at the forecast it sent). Keys at
// their limit sync every quarter window there, and the forecast read
// their rate over at least a quarter interval, so half of it: the fleet
// spent its first burst late, its second window 49% over the ideal
// (skewed: 71%), and over gossip a hot key refused 5% of what the ideal
// admits. Then 11-15% (13-15%) and 0.1%: the forecast still read a
// quarter window's rate from syncs 10 ms apart and followed it over two
// intervals, and at the limit the node that synced after a quiet spell
// took the bucket's whole refill while the next ones waited out their
// turns (turnOf in global's scripts). Now, over Redis, 2.3-3.8% (skewed
// 4.5-7.8%), seeds 1-5.
// Reproduce: go run ./cmd/demo sim --sync 2s --nodes 8 --scenario steady
func TestLongInterval(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("seven 30 s simulations")
	}
	for _, c := range []struct {
		backend, scenario string
		worst, falseRej   float64
	}{
		{"redis", "steady", 10, 5},
		{"redis", "skewed", 10, 5},
		{"redis", "bursts", 0, 5},
		{"gossip", "steady", 10, 5},
		{"gossip", "skewed", 12, 5},
		{"gossip", "bursts", 0, 6},
		{"gossip", "hotkey", 0, 1},
	} {
		t.Run(c.backend+"/"+c.scenario, func(t *testing.T) {
			t.Parallel()
			r, err := sim.Run(sim.Config{Scenario: c.scenario, Backend: c.backend, Nodes: 8, Interval: 2 * time.Second, Duration: 30 * time.Second})
			require.NoError(t, err)
			t.Logf("worst window %+.2f%%, false rejection %.3f%%, admitted %.2f%% of the ideal",
				r.OvershootWorst, r.FalseRejection, 100*float64(r.Admitted)/float64(max(1, r.Ideal)))
			assert.LessOrEqual(t, r.OvershootWorst, c.worst, "worst window, % of the limit")
			assert.LessOrEqual(t, r.FalseRejection, c.falseRej, "false rejection, % of the ideal")
		})
	}
}

// TestPartitionReserves holds the partition scenario (half of 8 nodes cut
// off from Redis for a third of the run, at twice the limit) to issue
// 20's target, by both algorithms: no window more than 10% over the
// limit. Redis reserves for the nodes it stops hearing what their ladder
// lets them spend, so the side it hears does not take the whole limit
// beside them. A sliding window reserved nothing (its leases count in the
// window when granted): its worst window was 48.7% over.
// Reproduce: go run ./cmd/demo sim --scenario partition --nodes 8 --algorithm slidingwindow
func TestPartitionReserves(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("two minute-long simulations")
	}
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			r, err := sim.Run(sim.Config{Scenario: "partition", Nodes: 8, Interval: 100 * time.Millisecond, Algorithm: alg})
			require.NoError(t, err)
			t.Logf("%v: worst window %+.3f%%, overshoot %.3f%%, false rejection %.3f%%", alg, r.OvershootWorst, r.Overshoot, r.FalseRejection)
			assert.LessOrEqual(t, r.OvershootWorst, 10.0, "worst window over the limit, %")
			assert.LessOrEqual(t, r.FalseRejection, 5.0, "false rejection, %")
		})
	}
}

// TestBurstsFromQuietOverGossip holds bursts that start together from
// quiet (1 s at three times the rate every 3 s), 8 nodes over gossip, to
// the limit by both algorithms. With sliding windows every node weighed
// its own rising forecast against the older ones it had heard of its
// peers, the weights summed to about 1.5, and the fleet admitted 124% of
// what the ideal admits, its worst window 31% over (gossip's unclaimed).
// Reproduce: go run ./cmd/demo sim --scenario bursts --backend gossip --nodes 8 --algorithm slidingwindow
func TestBurstsFromQuietOverGossip(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("two minute-long simulations")
	}
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			r, err := sim.Run(sim.Config{Scenario: "bursts", Backend: "gossip", Nodes: 8, Interval: 100 * time.Millisecond, Algorithm: alg})
			require.NoError(t, err)
			t.Logf("%v: admitted %.2f%% of the ideal, worst window %+.3f%%, false rejection %.3f%%",
				alg, 100*float64(r.Admitted)/float64(max(1, r.Ideal)), r.OvershootWorst, r.FalseRejection)
			assert.LessOrEqual(t, float64(r.Admitted), 1.01*float64(r.Ideal), "admitted, against the ideal")
			assert.LessOrEqual(t, r.OvershootWorst, 10.0, "worst window over the limit, %")
		})
	}
}

// TestBurstsRefuseLittle holds bursts over Redis (1 s at six times the
// limit every 3 s) to issue 20's false rejection at the limit, 1% of what
// an ideal limiter admits, at 4, 8 and 16 nodes, and to its worst window,
// 5%. At the limit the bucket's refill waited in Redis for the next
// node's sync, and every burst ended with the fleet behind the ideal by
// that much, lost once the idle bucket refilled to its cap: the default
// seed refused 1.73%, 1.47% and 1.59%. A lease now takes its lag (a fifth
// of an interval's refill) ahead of the bucket (global's lagOf): 0.77%,
// 0.49% and 0.59%, at the same sync operations, the worst window from 0
// to 1.45%, 0.33% and 0 of the limit (five seeds: docs/architecture.md,
// "The lag").
// Reproduce: go run ./cmd/demo sim --scenario bursts --nodes 8
func TestBurstsRefuseLittle(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("three minute-long simulations")
	}
	for _, nodes := range []int{4, 8, 16} {
		t.Run(strconv.Itoa(nodes), func(t *testing.T) {
			t.Parallel()
			r, err := sim.Run(sim.Config{Scenario: "bursts", Nodes: nodes, Interval: 100 * time.Millisecond})
			require.NoError(t, err)
			t.Logf("%d nodes: admitted %.2f%% of the ideal, worst window %+.3f%%, false rejection %.3f%%, %.1f sync operations a second",
				nodes, 100*float64(r.Admitted)/float64(max(1, r.Ideal)), r.OvershootWorst, r.FalseRejection, r.SyncOps)
			assert.LessOrEqual(t, r.FalseRejection, 1.0, "false rejection, % of the ideal")
			assert.LessOrEqual(t, r.OvershootWorst, 5.0, "worst window over the limit, %")
		})
	}
}
