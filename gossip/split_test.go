package gossip_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// partitioned returns how long g has been on a split's minority side, by
// its own account (zero on the majority side or whole).
func partitioned(t *testing.T, g *gossip.Gossip) time.Duration {
	t.Helper()
	resp, err := g.Sync(t.Context(), &fleet.Request{Interval: 100 * time.Millisecond})
	if err != nil {
		return -1 // cut off from everyone: not the case measured here
	}
	return resp.Partitioned
}

// TestSplitDetectedOnDefaults splits a fleet of 6 on gossip.New's own
// memberlist settings (no Tune) into {1,2} | {3,4,5,6}, and measures how
// long the minority takes to learn it is one: it must within the default
// ladder's first step, 5 s, so that its Limiters climb down while the
// majority, after the grace, takes back the whole limit. Then it heals
// the network and measures how long until every node sees all 6 again.
// HYBRIDLIMIT_SPLIT_TRIALS=n repeats it, and HYBRIDLIMIT_SPLIT_HOLD=35s
// holds the split that long before the heal (past memberlist's 30 s of
// gossip to the dead, so that only the re-joins heal it), for the
// figures in docs/gossip.md.
func TestSplitDetectedOnDefaults(t *testing.T) {
	t.Parallel()
	trials := 1
	if s := os.Getenv("HYBRIDLIMIT_SPLIT_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		trials = n
	}
	var hold time.Duration
	if s := os.Getenv("HYBRIDLIMIT_SPLIT_HOLD"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err)
		hold = d
	}
	for trial := range trials {
		c := gossiptest.Start(t, 6, func(_ int, cfg *gossip.Config) { cfg.Tune = nil })
		// No false suspicion before the cut, with the other tests of the
		// package running beside this one.
		watch := time.Now()
		for time.Since(watch) < time.Second {
			for i, g := range c.Nodes {
				require.Len(t, g.Members(), 6, "node %d suspected a live peer", i+1)
				require.Zero(t, partitioned(t, g))
			}
			time.Sleep(50 * time.Millisecond)
		}

		cut := time.Now()
		c.Partition([]int{0, 1}, []int{2, 3, 4, 5})
		var noticed [2]time.Duration
		deadline := cut.Add(10 * time.Second)
		for (noticed[0] == 0 || noticed[1] == 0) && time.Now().Before(deadline) {
			for i := range noticed {
				if noticed[i] == 0 && partitioned(t, c.Nodes[i]) > 0 {
					noticed[i] = time.Since(cut)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		for i := 2; i < 6; i++ {
			assert.Zero(t, partitioned(t, c.Nodes[i]), "node %d is on the majority side", i+1)
		}
		time.Sleep(time.Until(cut.Add(hold)))
		heal := time.Now()
		c.Heal()
		c.WaitMembers(t, 6, 30*time.Second)
		whole := time.Since(heal)
		t.Logf("trial %d: the minority {1,2} noticed the split after %v and %v; after the heal at %v, all 6 saw 6 members in %v",
			trial+1, noticed[0].Round(time.Millisecond), noticed[1].Round(time.Millisecond), heal.Sub(cut).Round(time.Millisecond), whole.Round(time.Millisecond))
		for i, d := range noticed {
			assert.NotZero(t, d, "node %d never noticed it was on the minority side within 10 s", i+1)
		}
		// Within the ladder's first step; each node within 8 s, as a
		// machine saturated by other work took up to 7 s once.
		assert.LessOrEqual(t, min(noticed[0], noticed[1]), 5*time.Second, "the minority noticed within the ladder's first step")
		assert.LessOrEqual(t, max(noticed[0], noticed[1]), 8*time.Second, "both minority nodes noticed")
		c.Close()
	}
}
