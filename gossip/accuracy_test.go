package gossip_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/local"
)

// limiters starts a hybrid Limiter on each node of c.
func limiters(t *testing.T, c *gossiptest.Cluster, interval time.Duration, shares fleet.Shares, p hybrid.Policy) []*hybrid.Limiter {
	t.Helper()
	return fleettest.Limiters(t, len(c.Nodes), func(i int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{p}, Syncer: c.Nodes[i], Shares: shares, Interval: interval}
	})
}

// TestFleetAccuracy offers five Limiters syncing over gossip twice the
// limit for several seconds and measures what the fleet admits, per
// window and overall, against the limit and an ideal single limiter fed
// the same arrivals. The 100 ms interval is held to its bounds; 250 ms
// and 1 s are reported (docs/gossip.md records the figures).
//
// The per-window bound is the sliding window's: it admits at most its
// limit in every aligned window, within 5%. A token bucket may admit
// its burst on top of its rate, and a lease spent the moment it is
// granted holds tokens that accrued over the interval before, so in
// any window after the first a leased token bucket admits up to
// limit * (1 + Interval/Window); it is held to that, and to 5% over
// the ideal limiter in all.
func TestFleetAccuracy(t *testing.T) {
	t.Parallel()
	const (
		limit  = 1000
		window = time.Second
		run    = 4 * time.Second
	)
	bucket := hybrid.Policy{Name: "api", Limit: limit, Window: window}
	sliding := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: limit, Window: window}
	tests := []struct {
		policy   hybrid.Policy
		interval time.Duration
		shares   fleet.Shares
		check    bool
	}{
		{sliding, 100 * time.Millisecond, fleet.DemandWeighted, true},
		{bucket, 100 * time.Millisecond, fleet.DemandWeighted, true},
		{bucket, 100 * time.Millisecond, fleet.Equal, true},
		{sliding, 250 * time.Millisecond, fleet.DemandWeighted, false},
		{bucket, 250 * time.Millisecond, fleet.DemandWeighted, false},
		{sliding, time.Second, fleet.DemandWeighted, false},
		{bucket, time.Second, fleet.DemandWeighted, false},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%v/%v/%v", tt.policy.Algorithm, tt.interval, tt.shares)
		t.Run(name, func(t *testing.T) {
			c := gossiptest.Start(t, 5, nil)
			nodes := limiters(t, c, tt.interval, tt.shares, tt.policy)
			r := fleettest.Drive(t, nodes, "k", []float64{400, 400, 400, 400, 400}, run)
			ir := r.IdealRun(t, tt.policy)
			got, ideal := len(r.Admitted), len(ir.Admitted)
			steady := r.MaxInWindowFrom(window, window)
			aligned := r.MaxAligned(window)
			t.Logf("%s: offered %d, admitted %d (per node %v), ideal %d: %.1f%% of ideal; "+
				"busiest window after the first %d (ideal %d), busiest aligned window %d (ideal %d), limit %d",
				name, len(r.Offered), got, r.PerNode(), ideal, 100*float64(got)/float64(ideal),
				steady, ir.MaxInWindowFrom(window, window), aligned, ir.MaxAligned(window), limit)
			if !tt.check {
				return
			}
			lead := 1 + tt.interval.Seconds()/window.Seconds()
			assert.GreaterOrEqual(t, float64(got), 0.9*float64(ideal), "part of the ideal admitted")
			if tt.policy.Algorithm == local.SlidingWindow {
				assert.LessOrEqual(t, float64(aligned), 1.05*limit, "admitted in one window")
				// The ideal's two-window estimate assumes the previous
				// window's requests came evenly; leases bunch them, so
				// the fleet may admit up to Interval/Window more over a
				// run, as with Redis (docs/architecture.md).
				assert.LessOrEqual(t, float64(got), lead*1.01*float64(ideal), "admitted overall")
			} else {
				// Measured against the ideal fed the same arrivals: on a
				// starved machine the arrivals themselves bunch. Under
				// -race on 2 cores the busiest window measured
				// 1,012-1,045 in 30 runs for a bound of 1,103 (1,019-1,140
				// before leases shared what is free); 1% for scheduling
				// noise.
				most := max(limit, float64(ir.MaxInWindowFrom(window, window)))
				assert.LessOrEqual(t, float64(steady), most*lead*1.01, "admitted in one window after the burst")
				assert.LessOrEqual(t, float64(got), 1.05*float64(ideal), "admitted overall")
			}
		})
	}
}
