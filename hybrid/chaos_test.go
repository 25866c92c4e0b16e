package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// chaosLadder steps down fast enough for a test to see every step.
var chaosLadder = partition.LadderConfig{Steps: []partition.Step{
	{Until: time.Second, Factor: 1}, {Until: 2 * time.Second, Factor: 0.5}, {Factor: 0.25},
}}

// redisVia returns a Redis Syncer whose client dials addr (a proxy in
// front of s) with its own pool, as a separate process would, with
// RedisConfig.Timeout timeout (0: the default, under which 50 ms of added
// round trip is a distant Redis, not an outage).
func redisVia(t *testing.T, s *redistest.Server, addr string, timeout time.Duration) *global.Redis {
	t.Helper()
	o := s.Options()
	o.Addr, o.ContextTimeoutEnabled = addr, true
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c, Timeout: timeout})
	require.NoError(t, err)
	return r
}

// usedIn reads the fleet's count for key from s, as an observer that
// consumes nothing.
func usedIn(t *testing.T, s *redistest.Server, key string, lim fleet.Limit) int64 {
	t.Helper()
	r := redisSyncer(t, s)
	resp, err := r.Sync(context.Background(), &fleet.Request{Node: "observer", Interval: time.Second,
		Keys: []fleet.Usage{{Key: key, Limit: lim}}})
	require.NoError(t, err)
	require.NoError(t, resp.Grants[0].Err)
	return resp.Grants[0].Used
}

// TestRedisOutage kills Redis, or black-holes it behind a TCP proxy, while
// four nodes offer it thousands of requests per second each, and checks
// what an outage may cost: Allow never waits on Redis, the fleet admits
// within the ladder's budget while cut off, it is back within two sync
// intervals of Redis, and Redis's counts are reconciled.
func TestRedisOutage(t *testing.T) {
	// Not parallel: the latency figures are for a machine not also
	// running this package's other tests.
	const (
		nodes    = 4
		limit    = 4000 // per second, the whole fleet
		perNode  = 2000 // offered per second: twice the limit in all
		counted  = 200  // per node per second on the reconciliation key
		interval = 100 * time.Millisecond
		run      = 6 * time.Second
		cutAt    = 1500 * time.Millisecond
		backAt   = 4 * time.Second
	)
	api := hybrid.Policy{Name: "api", Prefix: "api:", Limit: limit, Window: time.Second}
	// A day-long window with room to spare: nothing rolls out or is
	// refused, so Redis's count is exactly what was reported.
	count := hybrid.Policy{Name: "count", Prefix: "count:", Algorithm: local.SlidingWindow, Limit: 1 << 30, Window: 24 * time.Hour}
	countLimit := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 1 << 30, Window: 24 * time.Hour}

	for _, fault := range []string{"kill", "blackhole"} {
		t.Run(fault, func(t *testing.T) {
			srv := redistest.StartServer(t)
			proxy, err := faultnet.NewProxy(srv.Addr)
			require.NoError(t, err)
			t.Cleanup(func() { proxy.Close() })
			fl := fleettest.Limiters(t, nodes, func(int) hybrid.Config {
				return hybrid.Config{Policies: []hybrid.Policy{api, count},
					Syncer: redisVia(t, srv, proxy.Addr(), 100*time.Millisecond), Interval: interval, Ladder: chaosLadder}
			})

			var runs [2]*fleettest.Run
			var wg sync.WaitGroup
			wg.Go(func() {
				runs[0] = fleettest.Drive(t, fl, "api:k", []float64{perNode, perNode, perNode, perNode}, run)
			})
			wg.Go(func() {
				runs[1] = fleettest.Drive(t, fl, "count:k", []float64{counted, counted, counted, counted}, run)
			})
			start := time.Now()
			time.Sleep(cutAt)
			cut := time.Since(start)
			if fault == "kill" {
				srv.Kill()
			} else {
				proxy.Blackhole()
			}
			time.Sleep(backAt - time.Since(start))
			restoring := time.Since(start) // a restarted Redis may answer before Restart returns
			if fault == "kill" {
				srv.Restart(t)
			} else {
				proxy.Restore()
			}
			back := time.Since(start)
			healthy := time.Duration(0)
			for healthy == 0 && time.Since(start) < run {
				all := true
				for _, l := range fl {
					all = all && fleettest.Link(l.Health()) == partition.Healthy
				}
				if all {
					healthy = time.Since(start) - back
				}
				time.Sleep(time.Millisecond)
			}
			wg.Wait()
			r, rc := runs[0], runs[1]
			require.NotNil(t, r)
			require.NotNil(t, rc)
			for _, l := range fl {
				require.NoError(t, l.Close())
			}

			// Latency: a dead Redis is never waited on.
			var during []time.Duration
			for i, at := range r.Offered {
				if at >= int64(cut) && at < int64(back) {
					during = append(during, r.Latency[i])
				}
			}
			outage := fleettest.Run{Latency: during}
			var before []time.Duration
			for i, at := range r.Offered {
				if at < int64(cut) {
					before = append(before, r.Latency[i])
				}
			}
			healthyRun := fleettest.Run{Latency: before}
			p999, base := outage.Percentile(0.999), healthyRun.Percentile(0.999)
			t.Logf("%s: Allow during the outage (%d calls): p50 %v, p99 %v, p99.9 %v, max %v; before it, p99.9 %v",
				fault, len(during), outage.Percentile(0.5), outage.Percentile(0.99), p999, outage.Percentile(1), base)
			// Waiting on Redis would cost its 100 ms timeout. Below that,
			// a machine starved of CPU delays goroutines by itself: the
			// healthy part of the same run says by how much.
			assert.Less(t, p999, max(time.Millisecond, 3*base), "p99.9 of Allow while Redis is down")

			// Admitted while cut off: within the ladder's budget. The
			// fleet spends its leases (at most a sync's demand with
			// headroom each), then its fail-static buckets, which start
			// with the nodes' shares of what the fleet had left (at most
			// a burst in all) and refill at the limit times the factor in
			// force, counted from the last sync that reached Redis.
			lad, _ := partition.NewLadder(chaosLadder)
			refill := 0.0
			for d := time.Duration(0); d < back-cut; d += time.Millisecond {
				refill += limit * lad.Factor(d+interval) / 1000
			}
			leases := float64(nodes) * perNode * interval.Seconds() * 1.5
			budget := leases + limit + refill
			got := r.AdmittedBetween(cut, back)
			last := r.AdmittedBetween(restoring-200*time.Millisecond, restoring)
			t.Logf("%s: admitted while cut off %d (budget %.0f: leases %.0f + burst %d + refill %.0f; without the ladder %.0f); at factor 0.25, %d in 200ms (%.0f/s)",
				fault, got, budget, leases, limit, refill, leases+limit+limit*(back-cut).Seconds(), last, float64(last)/0.2)
			assert.LessOrEqual(t, float64(got), budget, "within the ladder's budget")
			assert.InDelta(t, limit*0.25*0.2, last, limit*0.25*0.2*0.35, "the last step holds the fleet to a quarter")

			// Recovery.
			t.Logf("%s: all nodes healthy %v after Redis was back", fault, healthy)
			assert.Positive(t, healthy, "healthy again before the run ended")
			assert.LessOrEqual(t, healthy, 2*interval+interval/2, "back within two sync intervals (and jitter)")
			after := r.AdmittedBetween(back+healthy+interval, run)
			t.Logf("%s: admitted after recovery %.0f/s (limit %d/s)", fault, float64(after)/(run-back-healthy-interval).Seconds(), limit)

			// Reconciliation: every admission on the counted key reaches
			// Redis once. A restarted Redis lost what was reported before
			// the kill; what was admitted since is reported.
			used := usedIn(t, srv, "count:k", countLimit)
			total := len(rc.Admitted)
			since := rc.AdmittedBetween(cut, run)
			t.Logf("%s: counted key: admitted %d (%d since the fault), Redis counts %d", fault, total, since, used)
			if fault == "kill" {
				assert.GreaterOrEqual(t, used, int64(since), "the outage's consumption is reported after the restart")
				assert.LessOrEqual(t, used, int64(rc.AdmittedBetween(cut-3*interval, run)), "and nothing from before it twice")
			} else {
				// A sync whose answer the black hole swallowed was
				// applied yet looks failed; its consumption is
				// reported again, and counted once (Usage.Series).
				// Before, Redis counted up to a sync's worth per
				// node twice.
				assert.GreaterOrEqual(t, used, int64(total), "nothing lost")
				assert.LessOrEqual(t, used, int64(total)+int64(total)/200, "Redis counts what was admitted, within 0.5%")
			}
		})
	}
}

// TestFailoverToGossip runs four nodes on Redis with gossip as their
// failover, kills Redis under twice the limit, and checks that the fleet
// goes on limiting within gossip's bound, healthy, rather than falling to
// the ladder's quarter.
func TestFailoverToGossip(t *testing.T) {
	t.Parallel()
	const (
		nodes    = 4
		limit    = 1000
		interval = 100 * time.Millisecond
		cutAt    = 1500 * time.Millisecond
		run      = 6 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	srv := redistest.StartServer(t)
	peers := gossiptest.Start(t, nodes, nil)
	fl := fleettest.Limiters(t, nodes, func(i int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Interval: interval,
			Syncer: redisSyncer(t, srv), Failover: peers.Nodes[i], Ladder: chaosLadder}
	})
	go func() {
		time.Sleep(cutAt)
		srv.Kill()
	}()
	levels := make(chan partition.Level, 1)
	go func() {
		time.Sleep(run - 500*time.Millisecond)
		worst := partition.Healthy
		for _, l := range fl {
			worst = max(worst, fleettest.Link(l.Health()))
		}
		levels <- worst
	}()
	r := fleettest.Drive(t, fl, "k", []float64{500, 500, 500, 500}, run)
	assert.Equal(t, partition.Healthy, <-levels, "gossip keeps a fleet-wide view")

	// From a second after the kill (the breaker is open, leases come from
	// gossip) to the end.
	from := cutAt + time.Second
	secs := (run - from).Seconds()
	rate := float64(r.AdmittedBetween(from, run)) / secs
	peak := r.MaxInWindowFrom(time.Second, from)
	bound := limit * (1 + interval.Seconds()/time.Second.Seconds())
	t.Logf("Redis dead from %v: fleet admitted %.0f/s (limit %d/s); busiest 1s window %d (gossip bound %.0f); the ladder alone would allow %d/s by now",
		cutAt, rate, limit, peak, bound, limit/4)
	assert.LessOrEqual(t, float64(peak), bound*1.05, "within gossip's bound")
	assert.GreaterOrEqual(t, rate, limit*0.9, "not fallen to the ladder")
}
