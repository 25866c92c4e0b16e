package global_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redisslot"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// scriptCalls is how many script calls s ran since its stats were reset.
func scriptCalls(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	c := s.Commands(t)
	return c["evalsha"] + c["eval"]
}

// TestLeaseBatchKeysFailAlone syncs 200 keys on one Redis, in a few
// script calls: the keys whose state is corrupt, or holds another type,
// fail alone, amid keys of the same call that are granted.
func TestLeaseBatchKeysFailAlone(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	req := &fleet.Request{Node: "n", Interval: 100 * time.Millisecond}
	for i := range 200 {
		lim := fleet.Limit{Limit: 1000, Window: time.Second}
		if i%2 == 1 {
			lim.Algorithm = local.SlidingWindow
		}
		req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprint("k", i), Limit: lim, Consumed: 1, Demand: 10})
	}
	_, err := r.Sync(ctx, req)
	require.NoError(t, err)
	bad := map[int]string{70: "corrupt", 71: "corrupt", 130: "wrong type", 199: "corrupt"}
	for i, how := range bad {
		k := global.RedisKeyForTest("hl:", req.Keys[i].Key, "lease")
		if how == "corrupt" {
			require.NoError(t, c.HSet(ctx, k, "tokens", "abc", "cur", "nan").Err())
		} else {
			require.NoError(t, c.Del(ctx, k).Err())
			require.NoError(t, c.Set(ctx, k, "x", 0).Err())
		}
	}
	s.ResetStats(t)
	resp, err := r.Sync(ctx, req)
	require.NoError(t, err)
	for i, g := range resp.Grants {
		if how, ok := bad[i]; ok {
			assert.ErrorIs(t, g.Err, fleet.ErrCorrupt, "key %d: %s", i, how)
			assert.NotErrorIs(t, g.Err, fleet.ErrUnreachable, "key %d: %s", i, how)
			assert.Zero(t, g.Lease, "key %d: %s", i, how)
			continue
		}
		if assert.NoError(t, g.Err, "key %d", i) {
			assert.GreaterOrEqual(t, g.Lease, int64(10), "key %d", i)
			assert.Equal(t, 1, g.Nodes, "key %d", i)
		}
	}
	calls := scriptCalls(t, s)
	t.Logf("200 keys in %d script calls; a corrupt key's error: %v", calls, resp.Grants[70].Err)
	assert.LessOrEqual(t, calls, int64(8), "script calls for 200 keys")
}

// TestLeaseBatchBySlotOnCluster syncs, on a 3-master Cluster, keys that
// share a hash slot and keys that do not: the first share one script
// call, the others take one each.
func TestLeaseBatchBySlotOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	r := newSyncer(t, cl.DeadlineClient(t))
	slotOf := func(key string) int { return redisslot.Of(global.RedisKeyForTest("hl:", key, "lease")) }
	var same, apart []string
	seen := map[int]bool{}
	for i := 0; len(same) < 8 || len(apart) < 8; i++ {
		k := fmt.Sprint("tenant-", i)
		switch slot := slotOf(k); {
		case len(same) == 0 || slot == slotOf(same[0]):
			if len(same) < 8 {
				same = append(same, k)
			}
		case !seen[slot] && len(apart) < 8:
			apart = append(apart, k)
		}
		seen[slotOf(k)] = true
	}
	lim := fleet.Limit{Limit: 1000, Window: time.Second}
	req := &fleet.Request{Node: "n", Interval: 100 * time.Millisecond}
	for i := range 8 {
		req.Keys = append(req.Keys, fleet.Usage{Key: same[i], Limit: lim, Demand: 5}, fleet.Usage{Key: apart[i], Limit: lim, Demand: 5})
	}
	ctx := context.Background()
	_, err := r.Sync(ctx, req) // the client learns the slot map, Redis the script
	require.NoError(t, err)
	for _, m := range cl.Masters {
		m.ResetStats(t)
	}
	resp, err := r.Sync(ctx, req)
	require.NoError(t, err)
	for i, g := range resp.Grants {
		if assert.NoError(t, g.Err, "key %s", req.Keys[i].Key) {
			assert.GreaterOrEqual(t, g.Lease, int64(5), "key %s", req.Keys[i].Key)
		}
	}
	calls := int64(0)
	for _, m := range cl.Masters {
		calls += scriptCalls(t, m)
	}
	assert.Equal(t, int64(1+8), calls, "one call for the 8 keys of one slot, one for each of the others")
}

// TestLeaseBatchPlainClientOnClusterMode syncs keys of many slots with a
// plain client on a Redis in Cluster mode (one master, every slot): it
// refuses keys of several slots in one call, and Sync carries keys of
// one slot a call from then on.
func TestLeaseBatchPlainClientOnClusterMode(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 1)
	m := cl.Masters[0]
	r := newSyncer(t, m.DeadlineClient(t))
	lim := fleet.Limit{Limit: 1000, Window: time.Second}
	req := &fleet.Request{Node: "n", Interval: 100 * time.Millisecond}
	for i := range 20 {
		req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprint("k", i), Limit: lim, Demand: 5})
	}
	ctx := context.Background()
	for round := range 2 {
		m.ResetStats(t)
		resp, err := r.Sync(ctx, req)
		require.NoError(t, err)
		for i, g := range resp.Grants {
			assert.NoError(t, g.Err, "round %d, key %d", round, i)
		}
		t.Logf("round %d: %d script calls for 20 keys", round, scriptCalls(t, m))
	}
	assert.Equal(t, int64(20), scriptCalls(t, m), "one slot a call, and no call refused")
}

// TestLeaseBatchWorkBudget syncs 64 keys whose state records 100 other
// live nodes each: a key's lease then reads some 400 fields, and a call
// that ran them all would hold Redis for many milliseconds. Each call
// stops once its work is done (about 1 ms), and Sync sends the rest in
// further calls: every key is granted, in more calls than one.
func TestLeaseBatchWorkBudget(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1_000_000, Window: time.Minute}
	req := &fleet.Request{Node: "n", Interval: time.Second}
	now := redisNow(t, c).UnixMicro()
	pipe := c.Pipeline()
	for i := range 64 {
		key := fmt.Sprint("k", i)
		req.Keys = append(req.Keys, fleet.Usage{Key: key, Limit: lim, Demand: 10})
		fields := []any{}
		for n := range 100 {
			o := fmt.Sprint("other-", n)
			fields = append(fields, "s:"+o, now, "d:"+o, 1, "l:"+o, 0, "g:"+o, now)
		}
		pipe.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"), fields...)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	_, err = r.Sync(ctx, oneKey("warm")) // the script is loaded
	require.NoError(t, err)

	s.ResetStats(t)
	resp, err := r.Sync(ctx, req)
	require.NoError(t, err)
	for i, g := range resp.Grants {
		if assert.NoError(t, g.Err, "key %d", i) {
			assert.Equal(t, 101, g.Nodes, "key %d", i)
			assert.Positive(t, g.Lease, "key %d", i)
		}
	}
	calls := scriptCalls(t, s)
	usec := s.CommandTimes(t)["evalsha"]
	t.Logf("64 keys of 101 nodes: %d script calls, %d µs of Redis each", calls, usec/max(calls, 1))
	assert.GreaterOrEqual(t, calls, int64(8), "calls bounded by their work")
	assert.Less(t, calls, int64(64), "more than one key a call")
}
