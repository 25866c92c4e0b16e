package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestPartialCutOverRedis cuts two of four nodes off a real Redis (a
// black-holing proxy in front of theirs) while the other two still reach
// it, all at twice the limit. The cut-off nodes spend their last share on
// the ladder (factor 1 for its first 5 s); Redis keeps that share
// reserved for them, so the nodes it still hears do not take the whole
// limit meanwhile. Before it did, the fleet admitted half again the limit
// (the simulator's partition scenario: 53% over in the worst window).
// A sliding window reserved nothing until 2026-11-28: 1,466/s.
func TestPartialCutOverRedis(t *testing.T) {
	t.Parallel()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			partialCut(t, alg)
		})
	}
}

func partialCut(t *testing.T, alg local.Algorithm) {
	const (
		limit    = 1000
		perNode  = 500 // twice the limit in all
		interval = 100 * time.Millisecond
		cutAt    = 1500 * time.Millisecond
		cutFor   = 3 * time.Second
		run      = cutAt + cutFor
	)
	srv := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Algorithm: alg, Limit: limit, Window: time.Second}
	var proxies []*faultnet.Proxy
	nodes := fleettest.Limiters(t, 4, func(i int) hybrid.Config {
		addr := srv.Addr
		if i >= 2 {
			px, err := faultnet.NewProxy(srv.Addr)
			require.NoError(t, err)
			t.Cleanup(func() { px.Close() })
			proxies = append(proxies, px)
			addr = px.Addr()
		}
		return hybrid.Config{Policies: []hybrid.Policy{p}, Syncer: redisVia(t, srv, addr, 100*time.Millisecond), Interval: interval}
	})
	time.AfterFunc(cutAt, func() {
		for _, px := range proxies {
			px.Blackhole()
		}
	})
	r := fleettest.Drive(t, nodes, "k", []float64{perNode, perNode, perNode, perNode}, run)
	for _, px := range proxies {
		px.Restore()
	}
	// From a second into the cut, when the cut-off nodes' leases have
	// lapsed and Redis has stopped counting them as active, to its end.
	from, to := cutAt+time.Second, run
	admitted := r.AdmittedBetween(from, to)
	perSec := float64(admitted) / (to - from).Seconds()
	cutSide := float64(r.AdmittedBetween(from, to, 2, 3)) / (to - from).Seconds()
	t.Logf("%v, cut off for %v: the fleet admitted %.0f/s against %d/s (the cut-off side %.0f/s)", alg, cutFor, perSec, limit, cutSide)
	assert.LessOrEqual(t, perSec, limit*1.10, "the reachable side leaves the cut side's share")
	assert.GreaterOrEqual(t, perSec, limit*0.85, "and takes the rest")
	assert.Greater(t, cutSide, limit*0.3, "the cut side spends its share")
}
