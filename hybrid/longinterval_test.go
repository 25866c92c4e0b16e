package hybrid_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestLongIntervalBursts drives a fleet of 4 over real Redis with a sync
// interval as long as the window, in bursts: 1 s at six times the limit,
// then 2 s idle, three times. Between bursts the nodes still hold leases
// sized to their fading forecasts, and the bucket must refill only to
// what those leave, or the next burst spends the full bucket and the
// leases both. Before the scripts counted live leases at every interval
// (they did only while the interval was at most an eighth of the
// window) the fleet admitted 118-126% of what a single limiter fed the
// same arrivals admits (simulator, 8 nodes: 128% at 1 s, 112% at
// 500 ms); now at most the ideal.
func TestLongIntervalBursts(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet driven for 9 s over real Redis")
	}
	const (
		nodes = 4
		limit = 400
		run   = 9 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second, Burst: limit}
	srv := redistest.StartServer(t)
	fleet := fleettest.Limiters(t, nodes, func(int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: redisSyncer(t, srv), Interval: time.Second, FleetSize: nodes}
	})
	// Each node: 600 a second (the fleet six times the limit) for the
	// first second of every three.
	r := fleettest.DriveLoad(t, fleet, "bursts", bursts(600), run)
	ideal := r.IdealRun(t, policy)
	over, under := r.Versus(ideal, time.Second)
	t.Logf("offered %d, admitted %d, ideal %d (%.1f%%): overshoot %.2f%%, false rejection %.2f%% of the ideal",
		len(r.Offered), len(r.Admitted), len(ideal.Admitted), 100*float64(len(r.Admitted))/float64(len(ideal.Admitted)), over, under)
	// A token or two a node for the lease a sync hands back as the
	// next is granted, and 2% for timing.
	assert.LessOrEqual(t, len(r.Admitted), len(ideal.Admitted)*102/100+2*nodes, "admitted over the run")
}

// bursts is fleettest.DriveLoad's due for perSecond requests a second a
// node during the first second of every three, none the other two.
func bursts(perSecond float64) func(int, time.Duration) float64 {
	return func(_ int, now time.Duration) float64 {
		cycles := math.Floor(now.Seconds() / 3)
		on := min(now.Seconds()-3*cycles, 1)
		return perSecond * (cycles + on)
	}
}

// TestLongIntervalSteady drives a fleet of 4 over real Redis at twice the
// limit with a sync interval twice the window. Keys at their limit then
// sync every quarter window, and the forecast must read their rate from
// those syncs: clamped to a quarter interval it read half of it, the
// fleet spent the first window's burst late and its second window went
// 49% over the ideal (simulator, 8 nodes; 71% skewed). Here, before:
// worst window 10.4-14.6% of the limit; after: 0.3-6.9% alone, 12.5%
// once beside a whole CI run. The 10% is the simulator's
// TestLongInterval's to hold; this bound catches the simulator's kind of
// failure (42-44% at this fleet's size) on real Redis.
func TestLongIntervalSteady(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet driven for 5 s over real Redis")
	}
	const (
		nodes = 4
		limit = 1000
		run   = 5 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second, Burst: limit}
	srv := redistest.StartServer(t)
	fleet := fleettest.Limiters(t, nodes, func(int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: redisSyncer(t, srv), Interval: 2 * time.Second, FleetSize: nodes}
	})
	due := func(_ int, now time.Duration) float64 { return 2 * limit / nodes * now.Seconds() }
	r := fleettest.DriveLoad(t, fleet, "steady", due, run)
	ideal := r.IdealRun(t, policy)
	over, under := r.Versus(ideal, time.Second)
	worst := r.WorstOver(ideal, time.Second)
	t.Logf("admitted %d, ideal %d: overshoot %.2f%%, false rejection %.2f%% of the ideal, worst window %+d (%.1f%% of the limit)",
		len(r.Admitted), len(ideal.Admitted), over, under, worst, 100*float64(worst)/limit)
	// False rejection, here 3.4-4.0% (4.2-4.9% before the turn), is the
	// simulator's to hold to the 5%; 8% catches what the
	// halved forecast did there (8-10% at this fleet's size).
	assert.LessOrEqual(t, under, 8.0, "false rejection, % of the ideal")
	// The worst window, 2.9-9.9% of the limit before a key at its limit
	// was leased for its turn (turnOf in global's scripts), is 1.0-2.2%
	// now, 0.1-8.1% under -race: held to 15%, the simulator to the
	// issue's 10% (sim's TestLongInterval).
	assert.LessOrEqual(t, worst, limit*3/20, "the worst window beyond the ideal")
}

// TestBurstsRefuseNoMore drives a fleet of 4 over real Redis at the
// default interval in bursts: 1 s at six times the limit, then 2 s idle,
// three times. At the limit the bucket's refill waits in Redis for the
// next node's sync, so the fleet ran behind an ideal limiter, and each
// burst ended with that lag unspent, lost once the idle bucket refilled
// to its cap. A lease may now take its lag ahead of the bucket (lagOf in
// global). The bursts at 3 s and 6 s are measured, the first being the
// key's cold start: under -race, before, 98-221 of the ideal's 8,000
// refused in them (four runs, 1.41-2.31% over the run); after, 4-128
// (0.44-1.29%). Real timing spreads a run's figure over a point and a
// half, so the bound is loose (the old code passed it in three runs of
// four), and the simulator's TestBurstsRefuseLittle holds the gain; this
// holds the side the lag could cost, what the fleet admits beyond the
// ideal.
func TestBurstsRefuseNoMore(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet driven for 9 s over real Redis")
	}
	const (
		nodes = 4
		limit = 2000
		run   = 9 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second, Burst: limit}
	srv := redistest.StartServer(t)
	fleet := fleettest.Limiters(t, nodes, func(i int) hybrid.Config {
		// Started an Interval apart over the nodes, as a fleet's nodes
		// start at other times: started together, their rounds stay
		// together for the run's 9 s (the loop's jitter is a tenth), and
		// what the fleet is behind at a burst's end is from when that
		// one round last ran, 0 to 200 tokens a run.
		if i > 0 {
			time.Sleep(100 * time.Millisecond / nodes)
		}
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: redisSyncer(t, srv), FleetSize: nodes}
	})
	r := fleettest.DriveLoad(t, fleet, "bursts", bursts(6*limit/nodes), run)
	ideal := r.IdealRun(t, policy)
	in := func(ats []int64, from time.Duration) (n int) {
		for _, at := range ats {
			if at >= int64(from) && at < int64(from+time.Second) {
				n++
			}
		}
		return n
	}
	var refused, best int
	for _, at := range []time.Duration{0, 3 * time.Second, 6 * time.Second} {
		f, i := in(r.Admitted, at), in(ideal.Admitted, at)
		t.Logf("the burst at %v: admitted %d, the ideal %d", at, f, i)
		if at > 0 {
			refused, best = refused+max(0, i-f), best+i
		}
	}
	over, under := r.Versus(ideal, time.Second)
	t.Logf("over the run: admitted %d, ideal %d: overshoot %.2f%%, false rejection %.2f%% of the ideal; the later bursts refused %d of the ideal's %d",
		len(r.Admitted), len(ideal.Admitted), over, under, refused, best)
	assert.LessOrEqual(t, refused, best/40, "refused in the later bursts of what the ideal admits: within 2.5%%")
	assert.LessOrEqual(t, len(r.Admitted), len(ideal.Admitted)+limit/50, "admitted over the run: within the ideal and three bursts' lag, 2%% of the limit")
}
