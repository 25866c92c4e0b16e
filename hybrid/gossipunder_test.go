package hybrid_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// TestGossipUnderLimit is TestUnderLimitRefusals over real memberlist
// gossip: four nodes, a key far under its limit (1,000 per second, burst
// 1,000), each node offered 60 requests at once every 500 ms, bursts
// that never take an ideal single limiter's bucket below 760, so every
// refusal is one the fleet had room for. Before the gossip table leased
// light keys their part of what is free (as the Redis scripts do), a
// node's lease followed its forecast, and the bursts found it short:
// 24.5-36.6% of requests refused; now 0.
func TestGossipUnderLimit(t *testing.T) {
	// Not parallel: it loads the machine, and runs apart from the
	// package's timing-bound tests (TestGossipSkew, TestManyKeysAreNotAnOutage).
	policy := hybrid.Policy{Name: "api", Limit: 1000, Window: time.Second, Burst: 1000}
	peers := gossiptest.Start(t, 4, nil)
	fleet := fleettest.Limiters(t, 4, func(i int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Interval: 100 * time.Millisecond, Syncer: peers.Nodes[i]}
	})
	peers.WaitMembers(t, 4, 10*time.Second)
	// Warm up: every node has synced the key, and heard the others.
	fleettest.Drive(t, fleet, "k", []float64{20, 20, 20, 20}, time.Second)
	r := fleettest.DriveLoad(t, fleet, "k", func(_ int, now time.Duration) float64 {
		return 60 * math.Floor(now.Seconds()/0.5+1)
	}, 3*time.Second)
	under := r.UnderLimit(t, policy)
	t.Logf("bursts far under the limit over gossip: admitted %d of %d, per node %v; under-limit refusals %.3f%%",
		len(r.Admitted), len(r.Offered), r.PerNode(), under)
	assert.LessOrEqual(t, under, 1.0, "under-limit refusals, %% of requests")
}
