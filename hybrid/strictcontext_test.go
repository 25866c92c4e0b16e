package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestStrictContext checks that a Strict decision's wait on the store
// ends when the caller's context does: a Redis 400 ms away, a
// StrictTimeout and a Redis Timeout of 5 s, and a context of 30 ms. The call returns the
// context's error with a refusing Decision, soon after the 30 ms; and a
// caller giving up is not the fleet failing: after more refusals of
// that kind than open the breaker, the node is Healthy and the next
// decision, with time to wait, is the store's. WaitN on a Strict key
// ends with its context too. (The interval is 2 s so that the syncs, on
// a SyncTimeout of the interval, do not time out on the delay.)
func TestStrictContext(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy, err := faultnet.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisVia(t, srv, proxy.Addr(), 5*time.Second), StrictTimeout: 5 * time.Second, Interval: 2 * time.Second,
		Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 100, Window: time.Minute}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	d, err := l.AllowNContext(context.Background(), "k", 1) // a connection, before the delay
	require.NoError(t, err)
	require.True(t, d.Allowed())
	proxy.SetDelay(200 * time.Millisecond) // each way

	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		start := time.Now()
		d, err := l.AllowNContext(ctx, "k", 1)
		took := time.Since(start)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, d.Allowed())
		assert.False(t, d.Degraded(), "the caller gave up; the fleet did not fail")
		assert.Less(t, took, 300*time.Millisecond, "the call waited for the store, not for its context")
	}
	h := l.Health()
	assert.Equal(t, partition.Healthy, h.Level, "a caller's deadline opened the breaker")
	assert.Zero(t, h.FailingKeys, "a caller's deadline counted as the key failing")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err = l.AllowNContext(ctx, "k", 1)
	require.ErrorIs(t, err, context.Canceled, "a done context decides nothing")
	assert.False(t, d.Allowed())

	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	start := time.Now()
	err = l.WaitN(ctx, "k", 1)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 300*time.Millisecond)

	d, err = l.AllowNContext(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed(), "the store's decision, in 400 ms")
	assert.False(t, d.Degraded())
}

// TestStrictCallerDeadlinesProbe: callers whose contexts are shorter than
// the store is slow never wait out StrictTimeout, so their decisions
// cannot tell a store that hangs from a slow one; the sync loop then
// probes the store itself, and a store that hangs opens the breaker:
// decisions follow the FailMode at once instead of each waiting out its
// caller's context.
func TestStrictCallerDeadlinesProbe(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy, err := faultnet.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisVia(t, srv, proxy.Addr(), 100*time.Millisecond), ManualSync: true, Interval: 10 * time.Millisecond,
		Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 100, Window: time.Minute}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	d, err := l.AllowNContext(context.Background(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed())

	proxy.Blackhole()
	short := func() (hybrid.Decision, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		return l.AllowNContext(ctx, "k", 1)
	}
	for i := range 6 {
		if _, err := short(); err == nil {
			t.Logf("the breaker opened after %d rounds", i)
			break
		}
		_ = l.SyncOnce(context.Background()) // probes the store: the callers could not tell
	}
	assert.NotEqual(t, partition.Healthy, l.Health().Level, "the store hangs")
	start := time.Now()
	d, err = short()
	require.NoError(t, err, "decided by the FailMode, not cut by the caller's context")
	assert.True(t, d.Degraded())
	assert.Less(t, time.Since(start), 5*time.Millisecond, "waited on a store the breaker knows is down")
}
