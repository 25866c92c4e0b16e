package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// lagFleet is n tables that know one another as members, for the
// weights' tests: hear passes each table's own entry for a key to every
// other table, as a round of gossip that reaches everyone would.
type lagFleet []*table

func newLagFleet(n int) lagFleet {
	f := make(lagFleet, n)
	for i := range f {
		cfg, _ := Config{Name: fmt.Sprint("n", i)}.withDefaults()
		f[i] = newTable(cfg.Name, 1, &cfg)
	}
	for _, a := range f {
		for _, b := range f {
			if a != b {
				a.join(b.self.name, "")
			}
		}
	}
	return f
}

func (f lagFleet) hear(key string, at instant) {
	h := xxh3.HashString(key)
	for _, from := range f {
		own := from.keys[h].own
		for _, to := range f {
			if to != from {
				to.merge(updateFrom(from.self.name, 1, own), at)
			}
		}
	}
}

// sync is every node's sync of key at demand, each from the views it
// holds now (none hears the others' syncs of this round), and the sum of
// the weights the grants give.
func (f lagFleet) sync(t *testing.T, key string, lim fleet.Limit, demand int64, at instant) (sum float64, grants []fleet.Grant) {
	t.Helper()
	for _, tab := range f {
		g := tab.sync(&fleet.Usage{Key: key, Limit: lim, Demand: demand}, 100*time.Millisecond, fleet.DemandWeighted, at, false)
		require.NoError(t, g.Err)
		sum += g.Weight
		grants = append(grants, g)
	}
	return sum, grants
}

// TestSlidingWeightsFromLaggingViews holds a sliding window's weights,
// computed by every node from views a round behind, to at most the whole
// key. A node's weight is its part of the window's count (its meter), so
// weights that sum past one admit past the limit. Every node's forecast
// rose together, each node saw its own a round or more before it heard
// the others', and each weighed itself against their older, lower
// forecasts: the simulator's bursts from quiet (every 3 s, 1 s at three
// times the rate, 8 nodes over gossip) admitted 124% of what an ideal
// limiter admits, 168% on 16 nodes. A node on a cold start, which has
// heard no one on the key, took the whole key.
func TestSlidingWeightsFromLaggingViews(t *testing.T) {
	t.Parallel()
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 4000, Window: time.Second}
	for _, n := range []int{4, 8, 16} {
		t.Run(fmt.Sprint(n, " nodes"), func(t *testing.T) {
			t.Parallel()
			f := newLagFleet(n)
			// Cold start: members, but no one heard on the key yet.
			sum, grants := f.sync(t, "k", lim, 400, t0)
			assert.LessOrEqual(t, sum, 1+1e-9, "cold start: the weights' sum")
			for _, g := range grants {
				assert.LessOrEqual(t, g.Weight, 1/float64(n)+1e-9, "cold start: a node's part of the key")
			}
			// Quiet: every node heard at a demand of 1 a round.
			at := t0
			for range 30 {
				at = at.add(100 * time.Millisecond)
				f.sync(t, "k", lim, 1, at)
				f.hear("k", at)
			}
			// The burst: every node's demand jumps before it hears the
			// others' rise.
			at = at.add(100 * time.Millisecond)
			sum, _ = f.sync(t, "k", lim, 600, at)
			assert.LessOrEqual(t, sum, 1+1e-9, "a burst from quiet: the weights' sum")
			// Once the fleet has heard the burst, the weights are its
			// demand-weighted parts again.
			for range 3 {
				f.hear("k", at)
				at = at.add(100 * time.Millisecond)
				sum, grants = f.sync(t, "k", lim, 600, at)
			}
			assert.InDelta(t, 1, sum, 1e-3, "heard: the weights' sum")
			for _, g := range grants {
				assert.InDelta(t, 1/float64(n), g.Weight, 1e-3, "heard: equal demands, equal parts")
			}
		})
	}
}

// TestSlidingWeightsLendWhatIsHeldBack checks that the cap above does not
// keep a heavy node at its equal part once the fleet has heard it: light
// nodes give up what they do not use, a round after they hear the heavy
// node's demand, and the heavy node takes it a round after that.
func TestSlidingWeightsLendWhatIsHeldBack(t *testing.T) {
	t.Parallel()
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 4000, Window: time.Second}
	f := newLagFleet(8)
	at := t0
	var heavy fleet.Grant
	for range 6 {
		for i, tab := range f {
			d := int64(40) // 400/s of 4,000/s
			if i == 0 {
				d = 600 // twice what the light ones leave
			}
			g := tab.sync(&fleet.Usage{Key: "k", Limit: lim, Demand: d}, 100*time.Millisecond, fleet.DemandWeighted, at, false)
			require.NoError(t, g.Err)
			if i == 0 {
				heavy = g
			}
		}
		f.hear("k", at)
		at = at.add(100 * time.Millisecond)
	}
	// Light nodes want 400/s each (forecasts, the demand over the
	// Limiter's headroom of 1.5: 267/s), 1,867/s together; the heavy one
	// gets the rest of the rate.
	assert.InDelta(t, 1-7*(400/1.5)/4000, heavy.Weight, 0.01, "the heavy node's weight, heard")
}

// TestSlidingWeightsColdStartIsTheKeys holds the cold start's rule to the
// key's age in the table, not the node's use of it (review of the cap):
// a raised limit is no cold start, a short interval does not end one
// before updates can come, and a forged entry holds nothing back.
func TestSlidingWeightsColdStartIsTheKeys(t *testing.T) {
	t.Parallel()
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 4000, Window: time.Second}
	syncAt := func(tab *table, lim fleet.Limit, demand int64, iv time.Duration, at instant) fleet.Grant {
		t.Helper()
		g := tab.sync(&fleet.Usage{Key: "k", Limit: lim, Demand: demand}, iv, fleet.DemandWeighted, at, false)
		require.NoError(t, g.Err)
		return g
	}

	t.Run("a raised limit", func(t *testing.T) {
		t.Parallel()
		f := newLagFleet(8) // two of eight members on the key
		heavy, light := f[0], f[1]
		at := t0
		var before fleet.Grant
		for range 10 {
			before = syncAt(heavy, lim, 300, 100*time.Millisecond, at)
			syncAt(light, lim, 10, 100*time.Millisecond, at)
			light.merge(updateFrom(heavy.self.name, 1, heavy.keys[xxh3.HashString("k")].own), at)
			heavy.merge(updateFrom(light.self.name, 1, light.keys[xxh3.HashString("k")].own), at)
			at = at.add(100 * time.Millisecond)
		}
		raised := lim
		raised.Limit = 5000
		g := syncAt(heavy, raised, 300, 100*time.Millisecond, at)
		assert.Greater(t, before.Weight, 0.5)
		assert.InDelta(t, before.Weight, g.Weight, 0.01, "the heavy node's weight across a raised limit")
		assert.Positive(t, g.Lease)
	})

	t.Run("a short interval", func(t *testing.T) {
		t.Parallel()
		f := newLagFleet(8)
		at := t0
		for round := range 6 { // 60 ms and nothing heard yet
			sum := 0.0
			for _, tab := range f {
				sum += syncAt(tab, lim, 40, 10*time.Millisecond, at).Weight
			}
			assert.LessOrEqual(t, sum, 1+1e-9, "round %d: the weights' sum", round)
			at = at.add(10 * time.Millisecond)
		}
	})

	t.Run("a forged entry", func(t *testing.T) {
		t.Parallel()
		// A forged entry's demand takes its part of the split, as any
		// live entry's (docs/gossip.md, Trust model); the weight it
		// claims to hold keeps nothing more from this node.
		weights := func(forged uint16) []float64 {
			tab := testTable()
			at := t0
			e := peerEntry("k", at, 0, 1)
			e.weight, e.demand = forged, 1
			var out []float64
			for range 5 {
				at = at.add(100 * time.Millisecond)
				e.stamp++
				tab.merge(updateFrom("evil", 1, e), at) // no member of the name
				out = append(out, syncAt(tab, lim, 100, 100*time.Millisecond, at).Weight)
			}
			return out
		}
		assert.Equal(t, weights(0), weights(weightScale))
	})
}

// TestWeightsCountAPeerOnce checks that a peer's variants, an
// incarnation before its restart or a window before its policy changed,
// count once in the split: each counted, a rolling restart cut every
// heavy node's weight for as long as the old entries stayed live.
func TestWeightsCountAPeerOnce(t *testing.T) {
	t.Parallel()
	lim := fleet.Limit{Limit: 4000, Window: time.Second}
	h := xxh3.HashString("k")
	for _, tt := range []struct {
		name   string
		second func(e entry) (inc uint64, _ entry)
	}{
		{"restarted", func(e entry) (uint64, entry) { e.stamp++; return 2, e }},
		{"a new window", func(e entry) (uint64, entry) {
			e.windowMs, e.stamp = 2000, e.stamp+1
			e.epoch = e.stamp / e.windowMs
			return 1, e
		}},
	} {
		for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
			t.Run(fmt.Sprint(tt.name, "/", alg), func(t *testing.T) {
				t.Parallel()
				lim := lim
				lim.Algorithm = alg
				weight := func(variants bool) float64 {
					tab := testTable()
					tab.join("p", "")
					at := t0.add(time.Second) // past the cold start
					tab.sync(&fleet.Usage{Key: "k", Limit: lim, Demand: 300}, 100*time.Millisecond, fleet.DemandWeighted, t0, false)
					e := entry{hash: h, windowMs: 1000, stamp: at.ms(), epoch: at.ms() / 1000, demand: 400, ttlMs: 200, weight: weightScale / 10}
					tab.merge(updateFrom("p", 1, e), at)
					if variants {
						inc, e2 := tt.second(e)
						tab.merge(updateFrom("p", inc, e2), at)
					}
					g := tab.sync(&fleet.Usage{Key: "k", Limit: lim, Demand: 300}, 100*time.Millisecond, fleet.DemandWeighted, at, false)
					require.NoError(t, g.Err)
					assert.Equal(t, 2, g.Nodes)
					return g.Weight
				}
				assert.InDelta(t, weight(false), weight(true), 1e-9, "a heavy node's weight beside a peer's two variants")
			})
		}
	}
}
