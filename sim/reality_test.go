package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/sim"
)

// TestReality runs one scenario (4 nodes, uniform load at twice the
// limit, 100 ms syncs, Redis) twice: on the wall clock against a real
// redis-server, and in the simulator. Their overshoot, false rejection
// and under-limit refusals must agree within 2 percentage points;
// docs/tuning.md records both.
func TestReality(t *testing.T) {
	t.Parallel()
	const (
		nodes    = 4
		rate     = 1000
		limit    = 2000
		interval = 100 * time.Millisecond
		run      = 6 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	srv := redistest.StartServer(t)
	fleet := fleettest.Limiters(t, nodes, func(int) hybrid.Config {
		r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t)})
		require.NoError(t, err)
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: r, Interval: interval}
	})
	real := fleettest.Drive(t, fleet, "k", []float64{rate, rate, rate, rate}, run)
	realOver, realFalse := real.Versus(real.IdealRun(t, policy), time.Second)
	realUnder := real.UnderLimit(t, policy)

	s, err := sim.Run(sim.Config{Nodes: nodes, Rate: rate, Limit: limit, Interval: interval, RTT: 200 * time.Microsecond, Duration: run})
	require.NoError(t, err)
	t.Logf("real Redis: admitted %d of %d, overshoot %.2f%%, false rejection %.2f%%; simulated: admitted %d of %d, overshoot %.2f%%, false rejection %.2f%%",
		len(real.Admitted), len(real.Offered), realOver, realFalse, s.Admitted, s.Offered, s.Overshoot, s.FalseRejection)
	assert.InDelta(t, realOver, s.Overshoot, 2, "overshoot agrees within 2 points")
	assert.InDelta(t, realFalse, s.FalseRejection, 2, "false rejection agrees within 2 points")
	t.Logf("under-limit refusals: real Redis %.3f%%, simulated %.3f%%", realUnder, s.UnderLimit)
	assert.InDelta(t, realUnder, s.UnderLimit, 2, "under-limit refusals agree within 2 points")
	// The points are small beside 2; the admissions, which the points are
	// drawn from, must agree too.
	realPart, simPart := float64(len(real.Admitted))/float64(len(real.Offered)), float64(s.Admitted)/float64(s.Offered)
	assert.InDelta(t, realPart, simPart, 0.02, "the part of the offered load admitted")
	// Both points are small, so the bounds above would pass a simulator
	// that merely echoed the ideal limiter: a fleet that syncs every
	// 100 ms must differ from it, as the real one does.
	assert.Positive(t, s.Overshoot+s.FalseRejection, "the simulated fleet is not the ideal")
	assert.NotEqual(t, s.Ideal, s.Admitted, "the simulated fleet is not the ideal")
}

// TestRealityManyKeys runs the zipf scenario at 10,000 keys (4 nodes,
// 1,000 requests a second each, every key far under its limit, 100 ms
// syncs) on the wall clock against a real redis-server and in the
// simulator, as issue 21 asks: their under-limit refusals, overshoot
// and false rejection must agree within 2 percentage points, and the
// store's work, key syncs a second, within a tenth: the simulator is
// what users size Redis with (docs/tuning.md). (They agree within 1%;
// the simulator counted the nodes' hand-back at the run's end, 10% more
// than the real fleet over 20 s, until this test.)
func TestRealityManyKeys(t *testing.T) {
	t.Parallel()
	const (
		nodes    = 4
		keys     = 10_000
		rate     = 1000
		interval = 100 * time.Millisecond
		run      = 20 * time.Second
	)
	limit := int64(nodes * rate / 2) // the simulator's default: a key's limit is half the fleet's load
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	srv := redistest.StartServer(t)
	var sent atomic.Int64
	fleet := fleettest.Limiters(t, nodes, func(int) hybrid.Config {
		r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t)})
		require.NoError(t, err)
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: countingRedis{r, &sent}, Interval: interval, MaxKeys: 4 * keys}
	})
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("k", i)
	}
	type arrival struct {
		key int
		at  int64
		ok  bool
	}
	start := time.Now()
	got := make([][]arrival, nodes)
	var wg sync.WaitGroup
	for i, l := range fleet {
		wg.Go(func() {
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(i), 7)), 1.1, 1, keys-1)
			issued := 0
			for now := time.Since(start); now < run; now = time.Since(start) {
				for due := int(now.Seconds() * rate); issued < due; issued++ {
					k := int(z.Uint64())
					at := int64(time.Since(start))
					d, err := l.Allow(names[k])
					if err != nil {
						t.Error(err)
						return
					}
					got[i] = append(got[i], arrival{k, at, d.Allowed()})
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	synced := sent.Load() // keys the syncs carried, as the simulator counts them
	perKey := make([]fleettest.Run, keys)
	offered := 0
	for _, node := range got {
		for _, a := range node {
			r := &perKey[a.key]
			r.Offered = append(r.Offered, a.at)
			r.Arrivals = append(r.Arrivals, fleettest.Arrival{At: a.at, Admitted: a.ok})
			if a.ok {
				r.Admitted = append(r.Admitted, a.at)
			}
			offered++
		}
	}
	var ideal, over, under, refusedUnder float64
	for i := range perKey {
		r := &perKey[i]
		if len(r.Offered) == 0 {
			continue
		}
		r.Start = start
		best := r.IdealRun(t, policy)
		o, u := r.Versus(best, time.Second)
		n := float64(len(best.Admitted))
		ideal, over, under = ideal+n, over+o*n/100, under+u*n/100
		refusedUnder += r.UnderLimit(t, policy) * float64(len(r.Arrivals)) / 100
	}
	realOver, realFalse, realUnder := 100*over/ideal, 100*under/ideal, 100*refusedUnder/float64(offered)
	realOps := float64(synced) / run.Seconds()

	s, err := sim.Run(sim.Config{Scenario: "zipf", Keys: keys, Nodes: nodes, Rate: rate, Interval: interval,
		RTT: 200 * time.Microsecond, Duration: run})
	require.NoError(t, err)
	t.Logf("real Redis: %d offered, overshoot %.2f%%, false rejection %.2f%%, under-limit refusals %.3f%%, %.0f key syncs/s; "+
		"simulated: %d offered, overshoot %.2f%%, false rejection %.2f%%, under-limit refusals %.3f%%, %.0f key syncs/s",
		offered, realOver, realFalse, realUnder, realOps, s.Offered, s.Overshoot, s.FalseRejection, s.UnderLimit, s.SyncOps)
	assert.InDelta(t, realOver, s.Overshoot, 2, "overshoot agrees within 2 points")
	assert.InDelta(t, realFalse, s.FalseRejection, 2, "false rejection agrees within 2 points")
	assert.InDelta(t, realUnder, s.UnderLimit, 2, "under-limit refusals agree within 2 points")
	assert.InEpsilon(t, realOps, s.SyncOps, 0.1, "key syncs a second agree within a tenth")
}

// countingRedis counts the keys its syncs carry.
type countingRedis struct {
	*global.Redis
	n *atomic.Int64
}

func (c countingRedis) Sync(ctx context.Context, req *fleet.Request) (*fleet.Response, error) {
	c.n.Add(int64(len(req.Keys)))
	return c.Redis.Sync(ctx, req)
}
