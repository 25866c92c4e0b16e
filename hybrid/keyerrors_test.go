package hybrid_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestKeyErrorFollowsFailMode puts a value of the wrong type where a
// key's lease state lives in a real Redis: the lease script fails for
// that key alone (WRONGTYPE). Each policy must then follow its FailMode,
// not refuse forever with no error, and Health must count the key and
// carry the error while the other keys are served as usual. Before the
// fix, each key was refused after its starter credit, whatever the
// FailMode, and Health said Healthy with nothing failing.
func TestKeyErrorFollowsFailMode(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	c := srv.Client(t)
	for _, key := range []string{"open:k", "closed:k", "static:k"} {
		require.NoError(t, c.SAdd(ctx, "hl:{"+key+"}:lease", "not a hash").Err())
	}
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk, FleetSize: 4,
		Policies: []hybrid.Policy{
			{Name: "open", Prefix: "open:", Limit: 1000, Window: time.Second, OnUnreachable: hybrid.FailOpen},
			{Name: "closed", Prefix: "closed:", Limit: 1000, Window: time.Second, OnUnreachable: hybrid.FailClosed},
			{Name: "static", Prefix: "static:", Limit: 1000, Window: time.Second},
			{Name: "fine", Prefix: "fine:", Limit: 1000, Window: time.Second},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for _, key := range []string{"open:k", "closed:k", "static:k", "fine:k"} {
		_, err := l.AllowN(key, 0)
		require.NoError(t, err)
	}
	for range 3 {
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(ctx), "the fleet is reachable")
	}
	h := l.Health()
	assert.Equal(t, partition.Healthy, h.Level, "one key's error is not an outage")
	assert.Equal(t, 3, h.FailingKeys)
	require.Error(t, h.KeyError)
	assert.Contains(t, h.KeyError.Error(), "WRONGTYPE")

	count := func(key string) (int, bool) { return offerN(t, l, key, 500) }
	n, deg := count("open:k")
	assert.Equal(t, 500, n, "FailOpen admits")
	assert.True(t, deg)
	n, deg = count("closed:k")
	assert.LessOrEqual(t, n, 1, "FailClosed refuses past the starter credit")
	assert.True(t, deg)
	n, deg = count("static:k")
	assert.InDelta(t, 250, n, 2, "FailStatic limits to the node's share: a quarter of the burst, FleetSize being 4")
	assert.True(t, deg)
	n, deg = count("fine:k")
	assert.Positive(t, n, "the other keys are served from their leases")
	assert.False(t, deg)

	// Once the bad value is gone, the keys are answered again and what
	// was admitted meanwhile is reported.
	for _, key := range []string{"open:k", "closed:k", "static:k"} {
		require.NoError(t, c.Del(ctx, "hl:{"+key+"}:lease").Err())
	}
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, 0, l.Health().FailingKeys)
	tokens, err := c.HGet(ctx, "hl:{open:k}:lease", "tokens").Float64()
	require.NoError(t, err, "open:k's lease state")
	assert.LessOrEqual(t, tokens, 500.0, "the 500 FailOpen admitted were reported")
}

// TestRedisOutOfMemory fills a real Redis past its maxmemory with the
// default noeviction policy, so that it refuses every write ("OOM command
// not allowed"). The fleet cannot take reports: that is an outage, not
// a mistake in the request. The breaker opens, Health says Degraded,
// and each policy's FailMode decides. Before issue 18 it was classed
// ErrInvalid: the breaker never opened, Health stayed Healthy, and a
// FailOpen key refused 199 of 200.
func TestRedisOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk,
		Policies: []hybrid.Policy{{Name: "open", Limit: 1000, Window: time.Second, OnUnreachable: hybrid.FailOpen}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, err = l.AllowN("k", 0)
	require.NoError(t, err)
	require.NoError(t, srv.Client(t).ConfigSet(ctx, "maxmemory", "1").Err())
	for range 4 {
		clk.Advance(100 * time.Millisecond)
		err := l.SyncOnce(ctx)
		require.Error(t, err)
		require.ErrorIs(t, err, fleet.ErrUnreachable)
	}
	assert.Equal(t, partition.Degraded, l.Health().Level)
	admitted := 0
	for range 200 {
		d, err := l.Allow("k")
		require.NoError(t, err)
		if d.Allowed() {
			admitted++
		}
	}
	assert.Equal(t, 200, admitted, "FailOpen")
}

// TestMaxKeyLenAgrees checks that hybrid.Config.MaxKeyLen cannot exceed
// what the fleet takes: a key between the two would be accepted by the
// Limiter and refused by Redis for good. New refuses the mismatch, and
// by default takes the fleet's limit.
func TestMaxKeyLenAgrees(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t), MaxKeyLen: 64})
	require.NoError(t, err)
	p := []hybrid.Policy{{Name: "p", Limit: 10, Window: time.Second}}
	_, err = hybrid.New(hybrid.Config{Syncer: r, Policies: p, MaxKeyLen: 100, ManualSync: true})
	require.ErrorContains(t, err, "Config.MaxKeyLen is 100 but Config.Syncer takes keys of at most 64 bytes")
	l, err := hybrid.New(hybrid.Config{Syncer: r, Policies: p, ManualSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	assert.Equal(t, 64, l.Config().MaxKeyLen)
	_, err = l.Allow(strings.Repeat("k", 65))
	require.ErrorIs(t, err, hybrid.ErrKeyTooLong)
}

// TestStartWithoutRedis starts a node while its Redis is down, the outage
// the library is built to survive: New succeeds, the node limits on its
// own (Degraded), and it joins the fleet once Redis answers. Before issue
// 18, global.NewRedis failed, so the service could not start at all.
func TestStartWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	srv.Kill()
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk,
		Policies: []hybrid.Policy{{Name: "p", Limit: 1000, Window: time.Second}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	_, err = l.Allow("k")
	require.NoError(t, err)
	err = l.SyncOnce(ctx)
	require.ErrorIs(t, err, fleet.ErrUnreachable)
	assert.Contains(t, err.Error(), srv.Addr, "the error names the address")
	assert.Equal(t, partition.Degraded, l.Health().Level)

	srv.Restart(t)
	for range 4 {
		clk.Advance(100 * time.Millisecond)
		_ = l.SyncOnce(ctx) // the breaker's probes
	}
	assert.Equal(t, partition.Healthy, l.Health().Level)
	d, err := l.Allow("k")
	require.NoError(t, err)
	assert.False(t, d.Degraded())
}

// TestFailingKeyForgotten checks that a key the fleet has answered with
// an error from its first sync is forgotten once idle, as any key is,
// rather than held (and counted failing) for good.
func TestFailingKeyForgotten(t *testing.T) {
	t.Parallel()
	s := syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i := range req.Keys {
			resp.Grants[i].Err = fmt.Errorf("%w: WRONGTYPE", fleet.ErrInvalid)
		}
		return resp, nil
	})
	l, clk := manual(t, hybrid.Config{Syncer: s, IdleTimeout: time.Second,
		Policies: []hybrid.Policy{{Name: "p", Limit: 100, Window: time.Second}}})
	_, err := l.Allow("k")
	require.NoError(t, err)
	for range 40 {
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(context.Background()))
	}
	assert.Zero(t, l.Len(), "idle for 3 s, with windows of 1 s")
	assert.Zero(t, l.Health().FailingKeys)
}
