package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestShardedStrictOutageCharged is TestStrictOutageCharged for a
// Strict key the fleet has split into shards: the node loses Redis (a
// network fault; Redis keeps its data and the fleet's shard mark), admits
// its fail-static share, and gets Redis back. What it admitted meanwhile
// must count against the shards its decisions go to.
func TestShardedStrictOutageCharged(t *testing.T) {
	t.Parallel()
	const limit, key = 120, "tenant"
	srv := redistest.StartServer(t)
	proxy, err := faultnet.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	ctx := context.Background()
	n, err := redisStore(t, srv).MarkShards(ctx, key, hybrid.DefaultHotKeyShards, time.Hour)
	require.NoError(t, err)
	require.Equal(t, hybrid.DefaultHotKeyShards, n)
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisVia(t, srv, proxy.Addr(), 100*time.Millisecond), ManualSync: true, Clock: clk, HotKeyRate: -1,
		Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: limit, Window: time.Minute}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	count := func() (int, bool) { return offerN(t, l, key, 150) }
	d, err := l.Allow(key) // on the shards
	require.NoError(t, err)
	require.True(t, d.Allowed())
	require.False(t, d.Degraded())

	proxy.Blackhole()
	during, degraded := count()
	require.True(t, degraded)
	proxy.Restore()
	for range 3 {
		clk.Advance(200 * time.Millisecond)
		_ = l.SyncOnce(ctx)
	}
	after, degraded := count()
	assert.False(t, degraded, "the store answers again")
	t.Logf("before 1, during the outage %d, after %d", during, after)
	assert.LessOrEqual(t, 1+during+after, limit+10, "admitted across the outage and the heal, against %d a minute", limit)
}

// TestFailingKeysForgotten: a Strict key whose state in Redis is
// corrupt, probed by the sync loop's charge after it was forgotten for
// being idle, must not stay counted in Health.FailingKeys once no key is
// left.
func TestFailingKeysForgotten(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk, IdleTimeout: time.Second,
		Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 100, Window: time.Second, OnUnreachable: hybrid.FailClosed}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	srv.Kill()
	for range 10 {
		d, err := l.Allow("k")
		require.NoError(t, err)
		require.True(t, d.Degraded())
	}
	srv.Restart(t)
	require.NoError(t, srv.Client(t).Set(ctx, "hl:{k}:gcra", "garbage", 0).Err())
	for i := range 6 {
		clk.Advance(time.Second)
		_ = l.SyncOnce(ctx)
		t.Logf("sync %d: keys %d, failing %d, %v", i, l.Len(), l.Health().FailingKeys, l.Health().KeyError)
	}
	require.Zero(t, l.Len(), "the idle key was forgotten")
	assert.Zero(t, l.Health().FailingKeys, "no key is left, yet Health counts one failing")
}

// downStrict is a Strict store that implements StrictDecider but not
// StrictCharger, and can be taken down.
type downStrict struct {
	*scripted
	down bool
}

func (s *downStrict) Allow(context.Context, string, fleet.Limit, int64) (store.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return store.Decision{}, errDown
	}
	return store.Decision{Allowed: true, Remaining: 1}, nil
}

// TestStrictNoChargerForgets: with a StrictDecider that is not a
// StrictCharger, a Strict key that admitted during an outage must still
// be forgotten once idle (and the store decide again once back), or
// MaxKeys fills with keys nothing will ever free.
func TestStrictNoChargerForgets(t *testing.T) {
	t.Parallel()
	s := &downStrict{scripted: newScripted(0), down: true}
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: s, ManualSync: true, Clock: clk, IdleTimeout: time.Second, MaxKeys: 10,
		Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 100, Window: time.Second, OnUnreachable: hybrid.FailOpen}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for i := range 10 {
		for range 5 {
			_, err := l.Allow(fmt.Sprint("k", i))
			require.NoError(t, err)
		}
	}
	s.mu.Lock()
	s.down = false
	s.mu.Unlock()
	for range 10 {
		clk.Advance(time.Second)
		_ = l.SyncOnce(context.Background())
	}
	assert.Zero(t, l.Len(), "keys idle for 10 IdleTimeouts and 10 Windows")
	_, err = l.Allow("new")
	assert.NoError(t, err, "a new key after the outage")
	d, err := l.Allow("new")
	require.NoError(t, err)
	assert.False(t, d.Degraded(), "the store is back")
}

// TestStrictChargesRoundTrips: after an outage, the Strict charges
// are sent one key per round trip, in sequence, holding the sync loop:
// with 200 keys owed and a Redis 10ms away the sync that charges them
// took 1.1-2.2s, ten Intervals or more with no lease synced and no key
// made room for; one pipelined round trip would take tens of ms.
func TestStrictChargesRoundTrips(t *testing.T) {
	t.Parallel()
	const keys = 200
	srv := redistest.StartServer(t)
	proxy, err := faultnet.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisVia(t, srv, proxy.Addr(), 100*time.Millisecond), ManualSync: true, Clock: clk, HotKeyRate: -1,
		Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 100, Window: time.Second, OnUnreachable: hybrid.FailOpen}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	proxy.Blackhole()
	for i := range keys {
		_, err := l.Allow(fmt.Sprint("k", i))
		require.NoError(t, err)
	}
	proxy.Restore()
	proxy.SetDelay(5 * time.Millisecond)
	clk.Advance(200 * time.Millisecond)
	start := time.Now()
	_ = l.SyncOnce(context.Background())
	took := time.Since(start)
	t.Logf("the sync that charged %d keys took %v", keys, took)
	assert.Less(t, took, 500*time.Millisecond, "one round trip per key owed, under the sync lock")
}
