package gossip_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestBurstsFromQuiet offers 8 Limiters over real memberlist bursts that
// start together from quiet at a sliding window's edge: 2 s at 2 requests
// a second a node, then 1 s at three times the limit, twice. Every node's
// forecast rose at once, each weighed its own against the older, lower
// ones it had heard of its peers, and each took up to nine tenths of the
// key (the simulator: 124% of what an ideal limiter admits). Held to the
// sliding window's own bound, as TestFleetAccuracy: at most the limit in
// any aligned window, within 5%.
//
// Not beside the package's parallel tests: a make test run with them
// admitted 1,501 in one window (2026-12-07), its nodes starved of the
// rounds that carry the weights; alone, 792-805 in every run.
func TestBurstsFromQuiet(t *testing.T) {
	if testing.Short() {
		t.Skip("8 nodes for 6 s")
	}
	const (
		nodes  = 8
		limit  = 800
		window = time.Second
		quiet  = 2.0                 // requests a second a node
		burst  = 3.0 * limit / nodes // requests a second a node
		period = 3 * time.Second     // a burst of one window every period
		run    = 2*period + 200*time.Millisecond
	)
	p := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: limit, Window: window}
	c := gossiptest.Start(t, nodes, nil)
	ls := limiters(t, c, 100*time.Millisecond, fleet.DemandWeighted, p)
	// Start 10 ms past a window's edge, so each burst fills one window.
	time.Sleep(window - time.Duration(time.Now().UnixNano())%window + 10*time.Millisecond)
	r := fleettest.DriveLoad(t, ls, "k", func(_ int, now time.Duration) float64 {
		n := quiet * now.Seconds()
		for at := period - window; at < now; at += period {
			n += burst * min(now-at, window).Seconds()
		}
		return n
	}, run)
	ir := r.IdealRun(t, p)
	got, ideal := len(r.Admitted), len(ir.Admitted)
	aligned := r.MaxAligned(window)
	t.Logf("offered %d, admitted %d (per node %v), ideal %d: %.1f%% of ideal; busiest aligned window %d (ideal %d), limit %d",
		len(r.Offered), got, r.PerNode(), ideal, 100*float64(got)/float64(ideal), aligned, ir.MaxAligned(window), limit)
	assert.LessOrEqual(t, float64(aligned), 1.05*limit, "admitted in one window")
}

// TestBurstsAtTheLimit offers 8 Limiters over real memberlist a token
// bucket's bursts: 1 s at six times the limit every 3 s, as the
// simulator's bursts scenario. At the limit the refill since a node's
// last sync, and what the weights hold back, wait in each node's view
// of the bucket; when a burst ends they are left there, and the idle
// time that fills the bucket wipes them out. A lease may now take its
// weight's part of the lag ahead (lagOf). The later two bursts refused
// 115-333 of the ideal's 15,985 before (three runs; the run's false
// rejection 0.97-2.10%), and 0-62 after (0.40-0.60%); under -race
// 0-187 (0.35-0.82%). Real memberlist's timing spreads the runs over
// each other's ranges, so this test holds the fleet to the bounds the
// lag keeps, as TestBurstsRefuseNoMore does over Redis: refused within
// 2.5% of the later bursts, and the run within the ideal and a lag a
// burst (80: what 4,000 a second refills in a fifth of 100 ms).
// TestLeaseTakesItsLag holds the grant itself.
//
// Not beside the package's parallel tests (see TestBurstsFromQuiet).
func TestBurstsAtTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("8 nodes for 9 s")
	}
	const (
		nodes  = 8
		limit  = 4000
		window = time.Second
		run    = 9 * time.Second
	)
	p := hybrid.Policy{Name: "api", Limit: limit, Window: window, Burst: limit}
	c := gossiptest.Start(t, nodes, nil)
	ls := limiters(t, c, 100*time.Millisecond, fleet.DemandWeighted, p)
	r := fleettest.DriveLoad(t, ls, "k", func(_ int, now time.Duration) float64 {
		cycles := math.Floor(now.Seconds() / 3)
		return 6 * limit / nodes * (cycles + min(now.Seconds()-3*cycles, 1))
	}, run)
	ideal := r.IdealRun(t, p)
	var refused, best int
	for _, at := range []time.Duration{0, 3 * time.Second, 6 * time.Second} {
		f, i := in(r.Admitted, at, at+window), in(ideal.Admitted, at, at+window)
		t.Logf("the burst at %v: admitted %d, the ideal %d", at, f, i)
		if at > 0 {
			refused, best = refused+max(0, i-f), best+i
		}
	}
	over, under := r.Versus(ideal, window)
	t.Logf("over the run: admitted %d, ideal %d: overshoot %.2f%%, false rejection %.2f%% of the ideal; the later bursts refused %d of the ideal's %d",
		len(r.Admitted), len(ideal.Admitted), over, under, refused, best)
	assert.LessOrEqual(t, refused, best/40, "refused in the later bursts of what the ideal admits: within 2.5%%")
	assert.LessOrEqual(t, len(r.Admitted), len(ideal.Admitted)+3*limit/50, "admitted over the run: within the ideal and a lag a burst")
}

// in is how many of ats fall in [from, to).
func in(ats []int64, from, to time.Duration) (n int) {
	for _, at := range ats {
		if at >= int64(from) && at < int64(to) {
			n++
		}
	}
	return n
}
