package global_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestLeaseReadsNodesOnceAnInterval: 100 nodes share a key, each
// syncing it once an interval. A lease reads every node recorded on the
// key at most once an interval (an HGETALL; see fleetOf for when);
// the others read their own fields and the aggregate. Each of the 100
// leases read all 100 nodes before (HGETALL 100 times a round), so that
// a key on 1,000 nodes cost Redis 2-3 ms a lease.
func TestLeaseReadsNodesOnceAnInterval(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	const nodes = 100
	lim := fleet.Limit{Limit: 1_000_000, Window: time.Hour}
	round := func() {
		for n := range nodes {
			_, err := r.Sync(ctx, &fleet.Request{Node: fmt.Sprint("node-", n), Interval: time.Second,
				Keys: []fleet.Usage{{Key: "shared", Limit: lim, Demand: 10, Consumed: 1}}})
			require.NoError(t, err)
		}
	}
	round()
	time.Sleep(time.Second) // the aggregate is an interval old
	s.ResetStats(t)
	start := time.Now()
	round()
	if time.Since(start) > 900*time.Millisecond {
		t.Skip("the round outlasted the interval: more than one lease may scan")
	}
	scans := s.Commands(t)["hgetall"]
	// One scan a round at most: none here, as the aggregate holds until
	// a node goes stale or a lease stops being live (aE), two intervals
	// after the last round's first lease.
	assert.LessOrEqual(t, scans, int64(1), "leases that read every node in a round of %d", nodes)
}

// TestAggregateMatchesScan sends the same leases to two keys, in the
// same calls (so at the same Redis time): one keeps its aggregate, whose
// time is deleted only now and then (a lease then scans every node); the
// other's is deleted before every call, so every lease scans. Within an
// interval, in which no node turns stale and no lease lapses, the two
// must grant the same: the aggregate, kept lease by lease, is what a
// scan finds. Nodes come and go, report in series and out of them,
// hand back, and rest (a Hold), by both algorithms, each alone and
// both on one key (a policy changing across the fleet: a sliding
// window's scan once counted no token-bucket lease out). Now and then
// both buckets are refilled, so that the leases out bound the grants.
func TestAggregateMatchesScan(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for seq, algs := range [][]local.Algorithm{{local.TokenBucket}, {local.SlidingWindow}, {local.TokenBucket, local.SlidingWindow}} {
		kept, scanned := fmt.Sprint("kept-", seq), fmt.Sprint("scanned-", seq)
		rng := rand.New(rand.NewPCG(1, uint64(seq)))
		totals := map[string]int64{}
		for step := range 400 {
			alg := algs[rng.IntN(len(algs))]
			lim := fleet.Limit{Algorithm: alg, Limit: 100_000, Window: 24 * time.Hour}
			node := fmt.Sprint("node-", rng.IntN(30))
			u := fleet.Usage{Limit: lim, Demand: rng.Int64N(3000), Consumed: rng.Int64N(200), Hold: time.Duration(rng.IntN(2)) * time.Minute}
			if rng.IntN(4) > 0 { // in a series, sometimes sent again or late
				totals[node] += u.Consumed
				u.Series, u.Total = 7, totals[node]-rng.Int64N(2)*u.Consumed
			}
			req := &fleet.Request{Node: node, Interval: 10 * time.Second, Keys: []fleet.Usage{u, u}}
			req.Keys[0].Key, req.Keys[1].Key = kept, scanned
			require.NoError(t, c.HDel(ctx, global.RedisKeyForTest("hl:", scanned, "lease"), "aT").Err())
			if rng.IntN(5) == 0 {
				for _, k := range []string{kept, scanned} { // refilled, as an idle while would
					require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", k, "lease"), "tokens", lim.Limit).Err())
				}
			}
			if rng.IntN(10) == 0 {
				require.NoError(t, c.HDel(ctx, global.RedisKeyForTest("hl:", kept, "lease"), "aT").Err())
			}
			resp, err := r.Sync(ctx, req)
			require.NoError(t, err)
			k, sc := resp.Grants[0], resp.Grants[1]
			require.NoError(t, k.Err)
			require.NoError(t, sc.Err)
			what := fmt.Sprintf("%v step %d: %+v", alg, step, u)
			require.Equal(t, sc.Nodes, k.Nodes, "nodes: %s", what)
			require.InDelta(t, sc.Weight, k.Weight, 1e-6, "weight: %s", what)
			require.Equal(t, sc.Lease, k.Lease, "lease: %s", what)
			require.Equal(t, sc.Used, k.Used, "used: %s", what)
			require.Equal(t, sc.Remaining, k.Remaining, "remaining: %s", what)
			require.Equal(t, sc.TTL, k.TTL, "ttl: %s", what)
		}
	}
}

// TestCorruptAggregate: the aggregate is derived from the nodes' fields,
// so a value in it that no lease writes (not a number, not finite,
// negative, not whole, a time ahead of Redis's, more nodes than a reply
// may count) is
// scanned again rather than trusted or failed on: the lease grants what
// a scan grants, and writes a sound aggregate back.
func TestCorruptAggregate(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1000, Window: time.Hour}
	sync := func(node string, keys ...string) *fleet.Response {
		t.Helper()
		req := &fleet.Request{Node: node, Interval: 10 * time.Second}
		for _, k := range keys {
			req.Keys = append(req.Keys, fleet.Usage{Key: k, Limit: lim, Demand: 400})
		}
		resp, err := r.Sync(ctx, req)
		require.NoError(t, err)
		return resp
	}
	bad := []string{"nan", "inf", "-inf", "1e400", "-1", "abc", "", "2.5", "1e300"}
	beyond := map[string]string{
		"aT": "1e17", // a time ahead of Redis's
		"aI": "1e17", // an interval beyond 1,000 of the lease's
		"aD": "1e17", // demand beyond 2^53 a node
		"aN": "3e9",  // more nodes than a reply counts (2^31 - 1)
		"aE": "1e17", // holding for more than 10,000 intervals after aT
	}
	for _, field := range []string{"aT", "aI", "aD", "aN", "aO", "aR", "aE", "aX"} {
		values := bad
		if v, ok := beyond[field]; ok {
			values = append(values[:len(values):len(values)], v)
		}
		for i, v := range values {
			key, twin := fmt.Sprint("corrupt-", field, i), fmt.Sprint("twin-", field, i)
			for _, n := range []string{"a", "b", "c"} {
				sync(n, key, twin)
			}
			h := global.RedisKeyForTest("hl:", key, "lease")
			require.NoError(t, c.HSet(ctx, h, field, v).Err())
			require.NoError(t, c.HDel(ctx, global.RedisKeyForTest("hl:", twin, "lease"), "aT").Err())
			resp := sync("d", key, twin)
			got, want := resp.Grants[0], resp.Grants[1]
			require.NoError(t, got.Err, "%s = %q", field, v)
			assert.Equal(t, want.Nodes, got.Nodes, "%s = %q", field, v)
			assert.Equal(t, want.Lease, got.Lease, "%s = %q", field, v)
			assert.Equal(t, want.Used, got.Used, "%s = %q", field, v)
			after, err := c.HGet(ctx, h, field).Result()
			require.NoError(t, err)
			assert.NotEqual(t, v, after, "%s = %q stays", field, v)
		}
	}
}

// TestAggregateForgetsStaleNodes: the aggregate follows time, not only
// the leases written into it. Five nodes take leases on a key, then
// only one syncs, once an interval: within the stale horizon (three
// intervals) and the scan an interval after it, the others stop
// counting and their leases stop being out, so that the one left is
// granted as a node alone is.
func TestAggregateForgetsStaleNodes(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	const interval = 50 * time.Millisecond
	lim := fleet.Limit{Limit: 1_000, Window: time.Hour}
	sync := func(node string) fleet.Grant {
		t.Helper()
		resp, err := r.Sync(ctx, &fleet.Request{Node: node, Interval: interval,
			Keys: []fleet.Usage{{Key: "fading", Limit: lim, Demand: 150}}})
		require.NoError(t, err)
		require.NoError(t, resp.Grants[0].Err)
		return resp.Grants[0]
	}
	for n := range 5 {
		sync(fmt.Sprint("node-", n))
	}
	assert.Equal(t, 5, sync("node-0").Nodes)
	var g fleet.Grant
	require.Eventually(t, func() bool {
		g = sync("node-0")
		return g.Nodes == 1
	}, 2*time.Second, interval, "the other nodes still count")
	assert.InDelta(t, 1.0, g.Weight, 1e-6, "weight alone")
}
