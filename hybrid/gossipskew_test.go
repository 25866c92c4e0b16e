package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// TestGossipSkew runs four Limiters over real memberlist gossip, one node
// taking 80% of twice the limit, and compares what the fleet admits with
// an ideal single limiter fed the same arrivals. Before the gossip
// table's water-filling weighed forecasts rather than demands with their
// headroom, the light nodes were reserved half again what they used and
// the heavy one was held short: 20.8-22.6% of what the ideal admitted was
// refused; now 3.8% over 10 s, 6.8% over 5 s (most of it in the first
// seconds, as the simulator shows: 4 nodes, 5 s, 4.9%).
func TestGossipSkew(t *testing.T) {
	t.Parallel()
	const (
		limit = 2000
		run   = 8 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	peers := gossiptest.Start(t, 4, nil)
	fleet := fleettest.Limiters(t, 4, func(i int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Interval: 100 * time.Millisecond, Syncer: peers.Nodes[i]}
	})
	r := fleettest.Drive(t, fleet, "k", []float64{3200, 800.0 / 3, 800.0 / 3, 800.0 / 3}, run)
	over, falseRej := r.Versus(r.IdealRun(t, policy), time.Second)
	t.Logf("one node taking 80%% of twice the limit over gossip: admitted %d of %d, per node %v; overshoot %.2f%%, false rejection %.2f%%",
		len(r.Admitted), len(r.Offered), r.PerNode(), over, falseRej)
	assert.Less(t, falseRej, 8.0, "false rejection, %% of the ideal's admissions")
	assert.Less(t, over, 5.0, "overshoot, %% of the ideal's admissions")
}
