package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestStrictOutageCharged kills the real Redis behind a Strict policy,
// lets the node admit its fail-static share, and brings Redis back: what
// the node admitted meanwhile must be charged to the key in Redis, as a
// Hybrid key's consumption is reported, so that the second after the
// heal does not start from a full bucket. Before the fix, the outage's
// admissions were never charged: 100 in the outage, then 100 more at
// once from Redis, against a limit of 100 per second.
func TestStrictOutageCharged(t *testing.T) {
	t.Parallel()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			clk := clock.NewManual(epoch)
			l, err := hybrid.New(hybrid.Config{
				Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk,
				Policies: []hybrid.Policy{
					{Name: "strict", Prefix: "s:", Mode: hybrid.Strict, Algorithm: alg, Limit: 100, Window: 10 * time.Second},
					// A Hybrid key, whose syncs probe the breaker as
					// they did before the fix.
					{Name: "hybrid", Prefix: "h:", Limit: 100, Window: time.Second},
				},
			})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			ctx := context.Background()
			_, err = l.Allow("h:x")
			require.NoError(t, err)
			require.NoError(t, l.SyncOnce(ctx))

			count := func() (int, bool) { return offerN(t, l, "s:k", 150) }
			srv.Kill()
			during, degraded := count()
			assert.True(t, degraded, "Redis is down")
			assert.InDelta(t, 100, during, 2, "the fail-static share: FleetSize 1, the whole limit")

			srv.Restart(t)
			for range 3 { // the breaker closes after three probes
				clk.Advance(200 * time.Millisecond)
				require.NoError(t, l.SyncOnce(ctx))
			}
			after, degraded := count()
			assert.False(t, degraded, "the store answers again")
			// The limit refills 10 a second: the node's clock moved 0.6s
			// (its fallback may have refilled 6 by it), Redis's less.
			assert.LessOrEqual(t, during+after, 100+10+5, "admitted across the outage and the heal, against 100 per 10s")
		})
	}
}

// TestStrictOnlyRecovers checks that a Limiter with Strict policies only
// goes back to its store once the store is back. Its breaker is probed by
// the sync loop's charges; before, with no Hybrid key to sync, nothing
// probed it and every decision stayed degraded for good.
func TestStrictOnlyRecovers(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk,
		Policies: []hybrid.Policy{{Name: "strict", Mode: hybrid.Strict, Limit: 100, Window: time.Second, OnUnreachable: hybrid.FailClosed}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	srv.Kill()
	for range 5 {
		d, err := l.Allow("k")
		require.NoError(t, err)
		require.True(t, d.Degraded())
	}
	srv.Restart(t)
	for range 3 {
		clk.Advance(200 * time.Millisecond)
		require.NoError(t, l.SyncOnce(context.Background()))
	}
	d, err := l.Allow("k")
	require.NoError(t, err)
	assert.False(t, d.Degraded(), "decided by the store again")
	assert.True(t, d.Allowed())
}

// TestStrictChargedOnce checks that what a Strict key admitted during an
// outage is charged once, however many syncs follow: the store's bucket
// shows the outage's admissions, not a multiple of them.
func TestStrictChargedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk, FleetSize: 4,
		Policies: []hybrid.Policy{{Name: "strict", Mode: hybrid.Strict, Limit: 100, Window: time.Minute}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	srv.Kill()
	during := 0
	for range 50 {
		d, err := l.Allow("k")
		require.NoError(t, err)
		if d.Allowed() {
			during++
		}
	}
	require.InDelta(t, 25, during, 1, "a quarter, FleetSize 4")
	srv.Restart(t)
	for range 8 {
		clk.Advance(200 * time.Millisecond)
		_ = l.SyncOnce(context.Background())
	}
	d, err := l.Allow("k")
	require.NoError(t, err)
	require.False(t, d.Degraded())
	assert.InDelta(t, 100-during-1, d.Remaining(), 3, "the store shows the outage's admissions once")
}
