package global_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// crowd writes into the state of each of keys nodes other live nodes,
// seen just now: each key's lease then reads 4*nodes fields more.
func crowd(t *testing.T, c *redis.Client, keys []string, nodes int) {
	t.Helper()
	ctx := context.Background()
	now := redisNow(t, c).UnixMicro()
	pipe := c.Pipeline()
	for _, key := range keys {
		fields := []any{}
		for n := range nodes {
			o := fmt.Sprint("other-", n)
			fields = append(fields, "s:"+o, now, "d:"+o, 1, "l:"+o, 0, "g:"+o, now)
		}
		pipe.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"), fields...)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
}

// TestLeaseBatchRoundTripsBounded syncs 192 keys of 101 nodes each, on a
// Redis 20 ms away: a call runs about six of them before its work
// budget, so most keys are left to later calls. Those must go out
// together, in a round trip or two more, not six keys a call and a call
// per 48 keys left, pass after pass: the sync took 17 round trips
// (360 ms at 20 ms each) where one pipeline of a script per key took one.
func TestLeaseBatchRoundTripsBounded(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	p, err := faultnet.NewProxy(s.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	o := s.Options()
	o.Addr, o.ContextTimeoutEnabled = p.Addr(), true
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	counter := &pipelineCounter{byNode: map[string]int{}}
	c.AddHook(counter.hook("redis"))
	r := newSyncer(t, c)
	ctx := context.Background()

	lim := fleet.Limit{Limit: 1_000_000, Window: time.Minute}
	req := &fleet.Request{Node: "n", Interval: time.Second}
	var keys []string
	for i := range 192 {
		keys = append(keys, fmt.Sprint("k", i))
		req.Keys = append(req.Keys, fleet.Usage{Key: keys[i], Limit: lim, Demand: 10})
	}
	crowd(t, s.Client(t), keys, 100)
	_, err = r.Sync(ctx, oneKey("warm")) // the script is loaded
	require.NoError(t, err)

	p.SetDelay(10 * time.Millisecond)
	counter.reset()
	start := time.Now()
	resp, err := r.Sync(ctx, req)
	elapsed := time.Since(start)
	require.NoError(t, err)
	for i, g := range resp.Grants {
		if assert.NoError(t, g.Err, "key %d", i) {
			assert.Equal(t, 101, g.Nodes, "key %d", i)
		}
	}
	trips := counter.reset()["redis"]
	t.Logf("192 keys of 101 nodes, 20 ms away: %d round trips, %v", trips, elapsed)
	assert.LessOrEqual(t, trips, 3, "round trips")
}

// armHook makes the proxy lose the reply of the pipeline after the one
// it is armed at: a reply lost in a sync's second round trip.
type armHook struct {
	p     *faultnet.Proxy
	armed atomic.Bool
}

func (h *armHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *armHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *armHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.armed.CompareAndSwap(true, false) {
			h.p.LoseReplies(1)
		}
		return err
	}
}

// TestLostBatchReplyCountsOnce loses the reply of a lease batch, after
// Redis ran it: 48 keys in one call, then keys of many nodes whose
// second round trip's reply is lost. Every key whose reply was lost
// fails as unreachable (and no other), and its node's next report, of
// the same series, counts once: no key is applied twice, none dropped.
func TestLostBatchReplyCountsOnce(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	p, err := faultnet.NewProxy(s.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	o := s.Options()
	o.Addr, o.ContextTimeoutEnabled = p.Addr(), true
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	arm := &armHook{p: p}
	c.AddHook(arm)
	r := newSyncer(t, c)
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1000, Window: 24 * time.Hour} // no refill to speak of

	request := func(prefix string, n int) *fleet.Request {
		req := &fleet.Request{Node: "n", Interval: time.Second}
		for i := range n {
			req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprint(prefix, i), Limit: lim,
				Consumed: 10, Demand: 1, Series: 7, Total: 10})
		}
		return req
	}
	_, err = r.Sync(ctx, oneKey("warm")) // the script is loaded
	require.NoError(t, err)

	light := request("light-", 48)
	p.LoseReplies(1)
	_, err = r.Sync(ctx, light)
	require.ErrorIs(t, err, fleet.ErrUnreachable, "a call of 48 keys whose reply is lost")

	heavy := request("heavy-", 24)
	var names []string
	for _, u := range heavy.Keys {
		names = append(names, u.Key)
	}
	crowd(t, s.Client(t), names, 100) // some six keys a call
	arm.armed.Store(true)
	resp, err := r.Sync(ctx, heavy)
	require.NoError(t, err, "the first round trip's grants stand")
	lost := 0
	for i, g := range resp.Grants {
		if g.Err != nil {
			assert.ErrorIs(t, g.Err, fleet.ErrUnreachable, "key %d", i)
			lost++
		}
	}
	t.Logf("24 keys of 101 nodes: %d lost in the second round trip", lost)
	assert.Positive(t, lost, "keys lost in the second round trip")
	assert.Less(t, lost, 24, "keys granted in the first")

	for _, req := range []*fleet.Request{light, heavy} {
		resp, err := r.Sync(ctx, req) // sent again: the same series, the same Total
		require.NoError(t, err)
		for i, g := range resp.Grants {
			if assert.NoError(t, g.Err, "key %s", req.Keys[i].Key) {
				assert.Equal(t, int64(10), g.Used-g.Lease, "key %s: its report counted once", req.Keys[i].Key)
			}
		}
	}
}

// TestFailedLeaseKeepsReserve: a key's lease that fails on another
// node's corrupt field must leave the key as it found it. It deleted its
// node's reserve (p:<node>, charged as spent while the node was silent)
// before reading the other nodes, so once the field was written again
// (the other node's own sync does) the node's report was charged in
// full, its silence charged twice: 110 used for 60 spent, 50 reserved.
func TestFailedLeaseKeepsReserve(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1000, Window: 24 * time.Hour} // no refill to speak of
	key := global.RedisKeyForTest("hl:", "k", "lease")
	now := redisNow(t, c).UnixMicro()
	// 50 reserved for n, charged as spent; another node live, its
	// demand garbage.
	require.NoError(t, c.HSet(ctx, key, "tokens", 950, "ts", now, "p:n", 50, "s:other", now, "d:other", "nan").Err())
	req := &fleet.Request{Node: "n", Interval: time.Second,
		Keys: []fleet.Usage{{Key: "k", Limit: lim, Consumed: 60, Series: 1, Total: 60}}}
	resp, err := r.Sync(ctx, req)
	require.NoError(t, err)
	require.ErrorIs(t, resp.Grants[0].Err, fleet.ErrCorrupt)

	require.NoError(t, c.HSet(ctx, key, "d:other", 5).Err()) // healed
	resp, err = r.Sync(ctx, req)                             // the same report again
	require.NoError(t, err)
	g := resp.Grants[0]
	require.NoError(t, g.Err)
	assert.Equal(t, int64(60), g.Used, "60 spent, 50 of them reserved and charged already")
}

// TestOutOfMemoryBatchWritesNothingNew: Redis is out of memory under
// noeviction, and a call's first key forgets a node long gone (an HDEL,
// a write Redis allows out of memory). Redis refuses a script's writes
// out of memory only until its first write: a lease batch that went on
// to its other keys under pcall wrote them all, 20 new keys' state
// created past maxmemory in one call, where a script per key was
// refused for each. No key's state may be created out of memory, and
// the keys refused fail as unreachable.
func TestOutOfMemoryBatchWritesNothingNew(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 100, Window: time.Second}
	req := &fleet.Request{Node: "n", Interval: 100 * time.Millisecond,
		Keys: []fleet.Usage{{Key: "old", Limit: lim, Demand: 5}}}
	for i := range 20 {
		req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprint("new-", i), Limit: lim, Demand: 5})
	}
	_, err := r.Sync(ctx, oneKey("warm")) // the script is loaded
	require.NoError(t, err)
	gone := redisNow(t, c).Add(-time.Hour).UnixMicro()
	require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", "old", "lease"), "s:gone", gone, "d:gone", 1).Err())

	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	resp, err := r.Sync(ctx, req)
	created := 0
	for _, u := range req.Keys[1:] {
		n, xerr := c.Exists(ctx, global.RedisKeyForTest("hl:", u.Key, "lease")).Result()
		require.NoError(t, xerr)
		created += int(n)
	}
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())
	t.Logf("out of memory: %d of 20 new keys' state created; Sync: %v", created, err)
	assert.Zero(t, created, "new keys' state created out of memory")
	if err == nil {
		for i, g := range resp.Grants[1:] {
			assert.ErrorIs(t, g.Err, fleet.ErrUnreachable, "new key %d", i)
		}
	} else {
		assert.ErrorIs(t, err, fleet.ErrUnreachable)
	}
}

// TestLeaseBatchLightBehindHeavy syncs 480 keys, each 48th of 700 nodes
// and first of its call, which it runs alone: the 47 light keys it
// leaves must still share calls, not take one each (480 script calls
// when the keys left went out as many a call as their batch ran).
func TestLeaseBatchLightBehindHeavy(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	counter := &pipelineCounter{byNode: map[string]int{}}
	c.AddHook(counter.hook("redis"))
	r := newSyncer(t, c)
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1_000_000, Window: time.Minute}
	req := &fleet.Request{Node: "n", Interval: time.Second}
	var heavy []string
	for i := range 480 {
		req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprint("k", i), Limit: lim, Demand: 10})
		if i%48 == 0 {
			heavy = append(heavy, req.Keys[i].Key)
		}
	}
	crowd(t, s.Client(t), heavy, 700)
	_, err := r.Sync(ctx, oneKey("warm")) // the script is loaded
	require.NoError(t, err)
	s.ResetStats(t)
	counter.reset()
	resp, err := r.Sync(ctx, req)
	require.NoError(t, err)
	for i, g := range resp.Grants {
		assert.NoError(t, g.Err, "key %d", i)
	}
	trips, calls := counter.reset()["redis"], scriptCalls(t, s)
	t.Logf("480 keys, each 48th of 700 nodes: %d round trips, %d script calls", trips, calls)
	assert.LessOrEqual(t, calls, int64(40), "script calls")
	assert.LessOrEqual(t, trips, 3, "round trips")
}
