package global_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

func newSyncer(t testing.TB, c redis.UniversalClient) *global.Redis {
	t.Helper()
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c, Timeout: 2 * time.Second})
	require.NoError(t, err)
	return r
}

// redisNow reads Redis's clock, the one the scripts use.
func redisNow(t testing.TB, c redis.UniversalClient) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

func TestNewRedisRejectsBadConfig(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	good := s.DeadlineClient(t)
	slow := redis.NewClient(s.Options()) // default 3s socket timeouts
	t.Cleanup(func() { slow.Close() })
	tests := []struct {
		name string
		cfg  global.RedisConfig
		want string
	}{
		{"no client", global.RedisConfig{}, "RedisConfig.Client"},
		{"brace in prefix", global.RedisConfig{Client: good, Prefix: "a{b"}, "RedisConfig.Prefix"},
		{"negative timeout", global.RedisConfig{Client: good, Timeout: -1}, "RedisConfig.Timeout"},
		{"negative key len", global.RedisConfig{Client: good, MaxKeyLen: -1}, "RedisConfig.MaxKeyLen"},
		{"client may hang", global.RedisConfig{Client: slow}, "redis.Options{ContextTimeoutEnabled: true}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := global.NewRedis(context.Background(), tt.cfg)
			require.ErrorIs(t, err, global.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestSyncRejectsBadUsage(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	_, err := r.Sync(ctx, &fleet.Request{Interval: time.Second})
	require.ErrorIs(t, err, fleet.ErrInvalid)

	ok := fleet.Limit{Limit: 10, Window: time.Second}
	resp, err := r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second, Keys: []fleet.Usage{
		{Key: "fine", Limit: ok, Demand: 3},
		{Key: "bad", Limit: fleet.Limit{Limit: 0, Window: time.Second}},
		{Key: string(make([]byte, 300)), Limit: ok},
		{Key: "neg", Limit: ok, Consumed: -1},
	}})
	require.NoError(t, err)
	require.Len(t, resp.Grants, 4)
	assert.NoError(t, resp.Grants[0].Err)
	assert.Equal(t, int64(3), resp.Grants[0].Lease, "the demand: no slack with an interval as long as the window")
	for _, g := range resp.Grants[1:] {
		assert.ErrorIs(t, g.Err, fleet.ErrInvalid)
	}
	assert.Contains(t, resp.Grants[1].Err.Error(), "Limit.Limit")
	assert.Contains(t, resp.Grants[2].Err.Error(), "MaxKeyLen")
}

// holder is one lease holder: it spends part of each lease and hands the
// rest back at its next sync.
type holder struct {
	node     string
	lease    int64
	consumed int64 // total reported to the fleet
}

func (h *holder) sync(t testing.TB, r *global.Redis, key string, lim fleet.Limit, rng *rand.Rand, demand int64) {
	spent := int64(0)
	if h.lease > 0 {
		spent = rng.Int64N(h.lease + 1)
	}
	resp, err := r.Sync(context.Background(), &fleet.Request{
		Node: h.node, Interval: 50 * time.Millisecond,
		Keys: []fleet.Usage{{Key: key, Limit: lim, Consumed: spent, Demand: demand}},
	})
	require.NoError(t, err)
	g := resp.Grants[0]
	require.NoError(t, g.Err)
	require.GreaterOrEqual(t, g.Lease, int64(0))
	if demand <= 0 {
		require.Zero(t, g.Lease, "nothing leased without demand")
	}
	require.LessOrEqual(t, g.Lease, max(lim.Burst, lim.Limit), "a lease may pass the demand (slack), never the burst")
	h.consumed += spent
	h.lease = g.Lease
}

// leaseStress runs 4 nodes x 8 goroutines, each goroutine its own lease
// holder, taking leases on one key for d, then checks that everything
// spent fits burst + rate * elapsed and the lag exactly, by Redis's clock.
func leaseStress(t *testing.T, c redis.UniversalClient, key string, lim fleet.Limit, d time.Duration) int64 {
	r := newSyncer(t, c)
	start := redisNow(t, c)
	var wg sync.WaitGroup
	var total atomic.Int64
	for n := range 4 {
		for g := range 8 {
			wg.Go(func() {
				h := &holder{node: fmt.Sprintf("node-%d/g-%d", n, g)}
				rng := rand.New(rand.NewPCG(uint64(n), uint64(g)))
				for deadline := time.Now().Add(d); time.Now().Before(deadline); {
					h.sync(t, r, key, lim, rng, 1+rng.Int64N(40))
				}
				h.sync(t, r, key, lim, rng, 0) // settle the last lease
				total.Add(h.consumed)
			})
		}
	}
	wg.Wait()
	elapsed := redisNow(t, c).Sub(start)
	rate := float64(lim.Limit) / lim.Window.Seconds()
	lag := min(math.Floor(rate*0.05/5), math.Floor(float64(lim.Burst)/40)) // what a lease may take ahead of the bucket: a fifth of the holders' 50 ms Interval's refill, at most a fortieth of the burst (lagOf)
	bound := float64(lim.Burst) + rate*elapsed.Seconds() + lag
	t.Logf("%s: spent %d in %v; bound %.1f (the lag %.0f)", key, total.Load(), elapsed.Round(time.Millisecond), bound, lag)
	require.LessOrEqual(t, float64(total.Load()), bound, "the fleet spent more than the bucket holds")
	return total.Load()
}

func TestLeaseConcurrencySingleNode(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	for _, lim := range []fleet.Limit{
		{Algorithm: local.TokenBucket, Limit: 2000, Window: time.Second, Burst: 300},
		{Algorithm: local.TokenBucket, Limit: 50, Window: time.Second, Burst: 10},
	} {
		spent := leaseStress(t, c, fmt.Sprintf("stress-%d", lim.Limit), lim, 1500*time.Millisecond)
		assert.Greater(t, spent, lim.Burst, "the fleet should spend more than one burst in 1.5s")
	}
}

func TestLeaseSlidingWindowBound(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r := newSyncer(t, c)
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 100, Window: time.Hour}
	var wg sync.WaitGroup
	var total atomic.Int64
	for n := range 8 {
		wg.Go(func() {
			h := &holder{node: "n" + strconv.Itoa(n)}
			rng := rand.New(rand.NewPCG(uint64(n), 9))
			for range 60 {
				h.sync(t, r, "sw", lim, rng, 1+rng.Int64N(20))
			}
			h.sync(t, r, "sw", lim, rng, 0)
			total.Add(h.consumed)
		})
	}
	wg.Wait()
	// Within one window the fleet never spends more than the limit, and
	// handing back unspent leases lets it use nearly all of it.
	assert.LessOrEqual(t, total.Load(), lim.Limit)
	assert.GreaterOrEqual(t, total.Load(), lim.Limit*9/10)
}

// TestLeaseReturned: unspent lease tokens come back to the fleet.
func TestLeaseReturned(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for _, lim := range []fleet.Limit{
		{Algorithm: local.TokenBucket, Limit: 100, Window: time.Hour},
		{Algorithm: local.SlidingWindow, Limit: 100, Window: time.Hour},
	} {
		key := "ret-" + lim.Algorithm.String()
		sync := func(node string, consumed, demand int64) fleet.Grant {
			resp, err := r.Sync(ctx, &fleet.Request{Node: node, Interval: time.Second,
				Keys: []fleet.Usage{{Key: key, Limit: lim, Consumed: consumed, Demand: demand}}})
			require.NoError(t, err)
			require.NoError(t, resp.Grants[0].Err)
			return resp.Grants[0]
		}
		g := sync("a", 0, 60)
		require.Equal(t, int64(60), g.Lease, lim.Algorithm.String())
		assert.Equal(t, int64(40), g.Remaining)
		// b wants 60 too but only 40 are left.
		g = sync("b", 0, 60)
		assert.Equal(t, int64(40), g.Lease)
		assert.Equal(t, 2, g.Nodes)
		// a spent 10 of its 60: 50 come back.
		g = sync("a", 10, 0)
		assert.Zero(t, g.Lease)
		assert.Equal(t, int64(50), g.Remaining, lim.Algorithm.String())
		assert.Equal(t, int64(50), g.Used)
	}
}

// TestLeaseShares checks the share arithmetic exactly: three nodes
// demanding 60:30:10 of a 100-token bucket they all want more of.
func TestLeaseShares(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 100, Window: time.Hour}
	tests := []struct {
		shares fleet.Shares
		// the leases granted to a, b and c, syncing in turn
		want    []int64
		weights []float64
	}{
		// Demand-weighted: a sees only itself (weight 1), takes its 60;
		// b's weight is 30/90, a third of the capacity: ceil(33.3) = 34,
		// capped at its demand of 30; c's 10/100 is 10.
		{fleet.DemandWeighted, []int64{60, 30, 10}, []float64{1, 30.0 / 90, 10.0 / 100}},
		// Equal: a alone takes 60; b's 1/2 of 100 is 50, capped by its
		// demand of 30; c's 1/3 of 100 is 34, capped at the 10 left.
		{fleet.Equal, []int64{60, 30, 10}, []float64{1, 0.5, 1.0 / 3}},
	}
	for _, tt := range tests {
		key := "shares-" + tt.shares.String()
		for i, d := range []int64{60, 30, 10} {
			node := string(rune('a' + i))
			resp, err := r.Sync(ctx, &fleet.Request{Node: node, Interval: time.Second, Shares: tt.shares,
				Keys: []fleet.Usage{{Key: key, Limit: lim, Demand: d}}})
			require.NoError(t, err)
			g := resp.Grants[0]
			require.NoError(t, g.Err)
			assert.Equal(t, tt.want[i], g.Lease, "%v node %s", tt.shares, node)
			assert.InDelta(t, tt.weights[i], g.Weight, 1e-6, "%v node %s", tt.shares, node)
			assert.Equal(t, i+1, g.Nodes)
		}
	}

	// Demand above the budget: a wants 100, b 300, of 100 tokens. Once
	// both demands are known, the weight caps what each takes, so neither
	// starves the other.
	for _, tt := range []struct {
		shares       fleet.Shares
		wantA, wantB int64
	}{{fleet.DemandWeighted, 25, 75}, {fleet.Equal, 50, 50}} {
		key := "cap-" + tt.shares.String()
		sync := func(node string, demand int64) int64 {
			resp, err := r.Sync(ctx, &fleet.Request{Node: node, Interval: time.Second, Shares: tt.shares,
				Keys: []fleet.Usage{{Key: key, Limit: lim, Demand: demand}}})
			require.NoError(t, err)
			require.NoError(t, resp.Grants[0].Err)
			return resp.Grants[0].Lease
		}
		require.Equal(t, int64(100), sync("a", 100), "alone, a takes its demand")
		require.Equal(t, int64(0), sync("b", 300), "nothing is left for b yet")
		// a hands its 100 back (it spent nothing) and takes its share.
		assert.Equal(t, tt.wantA, sync("a", 100), tt.shares.String())
		assert.Equal(t, tt.wantB, sync("b", 300), tt.shares.String())
	}
}

// TestStrictSeedBurst: the seed scenario on real Redis, per request.
func TestStrictSeedBurst(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	for _, tt := range []struct {
		lim  fleet.Limit
		want int
	}{
		{fleet.Limit{Algorithm: local.TokenBucket, Limit: 100, Window: time.Minute, Burst: 120}, 120},
		{fleet.Limit{Algorithm: local.SlidingWindow, Limit: 100, Window: time.Minute}, 100},
	} {
		admitted := 0
		start := time.Now()
		for range 150 {
			d, err := r.Allow(context.Background(), "seed-"+tt.lim.Algorithm.String(), tt.lim, 1)
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			} else {
				assert.Positive(t, d.RetryAfter)
			}
		}
		require.Less(t, time.Since(start), 600*time.Millisecond, "the burst must fit before a token refills")
		assert.Equal(t, tt.want, admitted, tt.lim.Algorithm.String())
	}
	d, err := r.Allow(context.Background(), "too-big", fleet.Limit{Limit: 5, Window: time.Second}, 6)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, local.Never, d.RetryAfter)
}

// TestScriptFlush: SCRIPT FLUSH in the middle of traffic loses no
// decision: exactly the limit is admitted.
func TestScriptFlush(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r := newSyncer(t, c)
	lim := fleet.Limit{Limit: 300, Window: time.Hour}
	stop := make(chan struct{})
	var flushes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				if c.ScriptFlush(context.Background()).Err() == nil {
					flushes.Add(1)
				}
			}
		}
	})
	var admitted atomic.Int64
	var work sync.WaitGroup
	for range 4 {
		work.Go(func() {
			for range 150 {
				d, err := r.Allow(context.Background(), "flushed", lim, 1)
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	work.Wait()
	close(stop)
	wg.Wait()
	assert.Equal(t, lim.Limit, admitted.Load())
	assert.Positive(t, flushes.Load())
}

// TestRedisKilled: a dead Redis fails the call within its timeout, as
// unreachable.
func TestRedisKilled(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c, Timeout: 300 * time.Millisecond})
	require.NoError(t, err)
	lim := fleet.Limit{Limit: 10, Window: time.Second}
	req := &fleet.Request{Node: "n", Interval: time.Second, Keys: []fleet.Usage{{Key: "k", Limit: lim, Demand: 1}}}
	_, err = r.Sync(context.Background(), req)
	require.NoError(t, err)

	s.Kill()
	start := time.Now()
	_, err = r.Sync(context.Background(), req)
	require.ErrorIs(t, err, fleet.ErrUnreachable)
	assert.Less(t, time.Since(start), 400*time.Millisecond)
	_, err = r.Allow(context.Background(), "k", lim, 1)
	require.ErrorIs(t, err, fleet.ErrUnreachable)

	// Back on the same port, with an empty script cache: it works again.
	s.Restart(t)
	require.Eventually(t, func() bool {
		_, err := r.Sync(context.Background(), req)
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
}

// TestMemoryPerKey reports what Redis holds per limit: MEMORY USAGE of a
// lease hash with one node and with four, and of each strict key.
func TestMemoryPerKey(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r := newSyncer(t, c)
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1000, Window: time.Minute}
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim.Algorithm = alg
		key := "mem-" + alg.String()
		_, err := r.Sync(ctx, &fleet.Request{Node: "alone", Interval: time.Second,
			Keys: []fleet.Usage{{Key: key + "-alone", Limit: lim, Demand: 10}}})
		require.NoError(t, err)
		for n := range 4 {
			_, err := r.Sync(ctx, &fleet.Request{Node: fmt.Sprint("node-", n), Interval: time.Second,
				Keys: []fleet.Usage{{Key: key, Limit: lim, Demand: 10}}})
			require.NoError(t, err)
		}
		// 500 tokens keep the strict token bucket's key alive for 30 s;
		// one would let it expire after 60 ms, before it is measured on
		// a loaded machine.
		_, err = r.Allow(ctx, key, lim, 500)
		require.NoError(t, err)
	}
	for _, k := range []string{"hl:{mem-gcra-alone}:lease", "hl:{mem-slidingwindow-alone}:lease", "hl:{mem-gcra}:lease", "hl:{mem-slidingwindow}:lease", "hl:{mem-gcra}:gcra", "hl:{mem-slidingwindow}:sw"} { // keys named by local.Algorithm.String
		n, err := c.MemoryUsage(ctx, k).Result()
		require.NoError(t, err, k)
		t.Logf("MEMORY USAGE %s = %d bytes", k, n)
		assert.Less(t, n, int64(1024), k)
	}
}

// TestStoredTimesKeepMicroseconds: times written by the scripts keep every
// digit. Lua's tostring keeps 14 significant digits, which would round a
// microsecond timestamp to 100 µs and skew a fast strict bucket by up to
// 100 µs worth of tokens.
func TestStoredTimesKeepMicroseconds(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r := newSyncer(t, c)
	ctx := context.Background()
	// The whole burst, so that the key outlives the read that follows
	// (about a second) on a loaded machine.
	lim := fleet.Limit{Limit: 1_000_000, Window: time.Second, Burst: 1_000_000}
	_, err := r.Allow(ctx, "fast", lim, 1_000_000)
	require.NoError(t, err)
	tat, err := c.Get(ctx, "hl:{fast}:gcra").Result()
	require.NoError(t, err)
	assert.NotContains(t, tat, "e+", "TAT stored as %q", tat)
	at, emission, ok := strings.Cut(tat, ";")
	require.True(t, ok, "stored as tat;emission: %q", tat)
	_, err = strconv.ParseInt(strings.TrimSuffix(at, ".0"), 10, 64)
	assert.NoError(t, err, "TAT %q should be whole microseconds", tat)
	assert.Equal(t, "1", emission, "a µs a token")

	_, err = r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second,
		Keys: []fleet.Usage{{Key: "fast", Limit: lim, Demand: 7}}})
	require.NoError(t, err)
	ts, err := c.HGet(ctx, "hl:{fast}:lease", "ts").Result()
	require.NoError(t, err)
	assert.NotContains(t, ts, "e+", "ts stored as %q", ts)
}

// TestRedisSilent: a Redis that accepts connections but never answers
// (a black hole, the nastier failure) fails the call within its timeout
// as unreachable; it never hangs.
func TestRedisSilent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held sync.WaitGroup
	stop := make(chan struct{})
	// The accept loop is held too, so that the cleanup's Wait waits for
	// it and no connection it accepts late (go-redis dials another as the
	// call times out) adds to a counter Wait has seen at zero: CI's race
	// detector caught that once, blaming the tests running beside it.
	held.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			held.Go(func() { // read nothing, answer nothing, keep it open
				<-stop
				conn.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		close(stop)
		held.Wait()
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true,
		DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })

	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c, Timeout: 200 * time.Millisecond})
	require.NoError(t, err, "NewRedis does not wait on Redis")
	start := time.Now()
	_, err = r.Sync(context.Background(), oneKey("k"))
	elapsed := time.Since(start)
	require.ErrorIs(t, err, fleet.ErrUnreachable)
	assert.Contains(t, err.Error(), ln.Addr().String())
	assert.Less(t, elapsed, 400*time.Millisecond, "the call must give up at its timeout")
	t.Logf("silent Redis: %v after %v", err, elapsed.Round(time.Millisecond))
}

// TestSlackLeavesRoomForDemand: slack leases, each node's equal part of
// what is free, are lent from what lies beyond a quarter of the burst,
// so that once many nodes hold slack on a key far under its limit, a
// node that demands tokens is still leased its demand. Lent down to the
// last token, 16 nodes' slack left the 17th 79 of the 100 it asked, and
// on 8 nodes × 100,000 keys whose rounds ran late (nodes that resync
// rarely hand their slack back rarely) nodes were leased nothing,
// Remaining 0, at a few requests a second on a limit of a million
// (BenchmarkFleetManyKeys).
func TestSlackLeavesRoomForDemand(t *testing.T) {
	t.Parallel()
	r := newSyncer(t, redistest.StartServer(t).DeadlineClient(t))
	// sync1's Interval is a second: a window of ten takes slack, up to
	// 200 of the 1,000 (slackOf).
	lim := fleet.Limit{Limit: 1000, Window: 10 * time.Second}
	lent := int64(0)
	for i := range 16 {
		g := sync1(t, r, fmt.Sprint("n", i), "k", lim, 0, 1)
		assert.GreaterOrEqual(t, g.Lease, int64(1))
		lent += g.Lease
	}
	assert.Greater(t, lent, int64(16), "slack was lent")
	g := sync1(t, r, "late", "k", lim, 0, 100)
	assert.Equal(t, int64(100), g.Lease, "the demand, lent %d before", lent)
	assert.GreaterOrEqual(t, g.Remaining, lim.Limit/4-100, "a quarter of the burst stays free of slack")
}

// TestLeaseTakesItsLag: at the limit a lease may take its lag ahead of
// the bucket (lagOf: what the limit refills in a fifth of an interval, at
// most a fortieth of the burst), and the bucket owes no more than that: a
// node leased the whole bucket, a second node asking is leased the lag
// (before: only the refill since, none), and a third nothing beyond the
// refill, the lag being owed. With a burst of a tenth of the limit the
// lag is the burst's: sized by the limit alone it was 20 of a bucket of
// 100.
func TestLeaseTakesItsLag(t *testing.T) {
	t.Parallel()
	r := newSyncer(t, redistest.StartServer(t).DeadlineClient(t))
	// sync1's Interval is a second: on a window of ten, a fifth of a
	// second's refill is 20 of the 1,000.
	for _, c := range []struct {
		lim fleet.Limit
		lag int64
	}{
		{fleet.Limit{Limit: 1000, Window: 10 * time.Second}, 20},
		{fleet.Limit{Limit: 1000, Window: 10 * time.Second, Burst: 100}, 2},
	} {
		key := fmt.Sprint("k", c.lim.Capacity())
		start := time.Now()
		a := sync1(t, r, "a", key, c.lim, 0, 1000)
		require.Equal(t, c.lim.Capacity(), a.Lease, "a takes the bucket")
		b := sync1(t, r, "b", key, c.lim, 0, 1000)
		d := sync1(t, r, "c", key, c.lim, 0, 1000)
		refill := int64(time.Since(start)/(10*time.Millisecond)) + 1 // 100 a second, and one for the fraction
		t.Logf("burst %d: leased a %d, b %d, c %d; the refill up to %d", c.lim.Capacity(), a.Lease, b.Lease, d.Lease, refill)
		assert.GreaterOrEqual(t, b.Lease, c.lag, "b takes the lag")
		assert.LessOrEqual(t, b.Lease+d.Lease, c.lag+refill, "b and c: the lag and the refill, no more")
		assert.Zero(t, d.Remaining, "nothing left")
	}
}
