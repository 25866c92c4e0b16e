package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestStoreMatchesRedis sends the same sequences of syncs to the
// simulator's store and to global's lease scripts on a real Redis, and
// requires the same grants: leases, the fleet's usage and remaining, the
// node count, the weights and the TTL. One sequence takes and gives back
// leases, runs into debt, and starves a node; the other reports in a
// series (Usage.Series, Total): sent again, folded, behind the series (a
// late report, or one after a Cancel) with a live lease out, a new
// series, and none. Both by both algorithms and both ways of sharing.
// The limits refill so slowly (1,000 a day) that the milliseconds
// between the two calls change nothing.
func TestStoreMatchesRedis(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	type step struct {
		node                    string
		consumed, demand, total int64
		series                  uint64
	}
	sequences := []struct {
		name  string
		steps []step
	}{
		{"parity", []step{
			{"a", 0, 300, 0, 0},
			{"b", 0, 500, 0, 0},
			{"a", 100, 400, 0, 0},  // gives 200 back
			{"c", 50, 1000, 0, 0},  // spent without a lease: debt
			{"b", 700, 200, 0, 0},  // spent beyond its lease
			{"a", 400, 0, 0, 0},    // wants nothing more
			{"c", 0, 2000, 0, 0},   // more than is left
			{"b", 150, 2000, 0, 0}, // contended
		}},
		{"series", []step{
			{"a", 10, 300, 10, 7},
			{"a", 10, 300, 10, 7},   // sent again: the lease given back, a new one
			{"b", 0, 200, 0, 0},     // another node
			{"a", 50, 600, 60, 7},   // the next report
			{"a", 40, 0, 50, 7},     // a late one: the lease stays out
			{"b", 100, 2000, 0, 0},  // contended
			{"a", 600, 100, 660, 7}, // settles both leases
			{"a", 5, 100, 5, 9},     // a new series
			{"a", 5, 100, 0, 0},     // none
		}},
	}
	for _, seq := range sequences {
		for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
			for _, shares := range []fleet.Shares{fleet.DemandWeighted, fleet.Equal} {
				key := fmt.Sprintf("%s-%v-%v", seq.name, alg, shares)
				lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: 24 * time.Hour}
				st := &store{keys: map[string]*lease{}}
				for i, s := range seq.steps {
					req := fleet.Request{Node: s.node, Interval: time.Second, Shares: shares,
						Keys: []fleet.Usage{{Key: key, Limit: lim, Consumed: s.consumed, Demand: s.demand, Series: s.series, Total: s.total}}}
					w, g, _ := syncBoth(t, r, client, st, req)
					what := fmt.Sprintf("%s %v %v step %d (%+v)", seq.name, alg, shares, i, s)
					assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
					assert.Equal(t, w.Used, g.Used, "used: %s", what)
					assert.Equal(t, w.Remaining, g.Remaining, "remaining: %s", what)
					assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
					assert.InDelta(t, w.Weight, g.Weight, 1e-6, "weight: %s", what)
					assert.Equal(t, w.TTL, g.TTL, "ttl: %s", what)
				}
			}
		}
	}
}

// TestStoreMatchesRedisSlack is TestStoreMatchesRedis where leases take
// slack (a window ten intervals long): 16 nodes each lent their part of
// what is free beyond a quarter of the burst, then one that asks for
// 100 (global's TestSlackLeavesRoomForDemand). A token bucket's: its
// level is what the leases leave, whatever the time between the calls.
func TestStoreMatchesRedisSlack(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	for _, shares := range []fleet.Shares{fleet.DemandWeighted, fleet.Equal} {
		key := fmt.Sprintf("slack-%v", shares)
		lim := fleet.Limit{Limit: 1000, Window: time.Second}
		st := &store{keys: map[string]*lease{}}
		for i := range 17 {
			node, demand := fmt.Sprint("n", i), int64(1)
			if i == 16 {
				node, demand = "late", 100
			}
			req := fleet.Request{Node: node, Interval: 100 * time.Millisecond, Shares: shares,
				Keys: []fleet.Usage{{Key: key, Limit: lim, Demand: demand}}}
			w, g, _ := syncBoth(t, r, client, st, req)
			what := fmt.Sprintf("%v step %d", shares, i)
			assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
			assert.Equal(t, w.Remaining, g.Remaining, "remaining: %s", what)
			assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
		}
	}
}

// TestStoreMatchesRedisTurn holds the simulator's store and Redis's
// scripts to the turn (turnOf): at an interval longer than an eighth of
// the window, a lease granted while less than a quarter of the capacity
// is left takes at most its weight's part of twice what the limit
// refills over the node's turn, an interval or, from an interval as
// long as the window, an eighth of the window. One node leases 780 of
// 1,000; two more that demand 100 each come to a bucket of about 220.
// Before the turn each was leased its 100, its weight's part of the
// capacity allowing 114: the first to sync after a quiet spell took
// what the others needed for their turns. At 100 ms nothing changes.
func TestStoreMatchesRedisTurn(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	for _, c := range []struct {
		interval time.Duration
		want     [2]int64 // the two late nodes' leases: ceil(2*turn*weight), weights 100/880 and 100/980
	}{
		{2 * time.Second, [2]int64{29, 26}},          // turn 125: an eighth of the window
		{200 * time.Millisecond, [2]int64{46, 41}},   // turn 200: the interval
		{100 * time.Millisecond, [2]int64{100, 100}}, // no turn: slack and lag instead
	} {
		for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
			key := fmt.Sprintf("turn-%v-%v", c.interval, alg)
			lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: time.Second}
			st := &store{keys: map[string]*lease{}}
			for i, demand := range []int64{780, 100, 100} {
				req := fleet.Request{Node: fmt.Sprint("n", i), Interval: c.interval,
					Keys: []fleet.Usage{{Key: key, Limit: lim, Demand: demand}}}
				w, g, _ := syncBoth(t, r, client, st, req)
				what := fmt.Sprintf("%v, %v, node %d", c.interval, alg, i)
				assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
				assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
				if i > 0 {
					assert.Equal(t, c.want[i-1], w.Lease, "Redis's lease: %s", what)
				} else {
					assert.Equal(t, demand, w.Lease, "a full bucket: %s", what)
				}
			}
		}
	}
}

// realStore is global's lease store on a real Redis of its own, and
// the client it uses, for the tests that hold the simulator's store to it.
func realStore(t *testing.T) (*global.Redis, *redis.Client) {
	t.Helper()
	client := redistest.StartServer(t).DeadlineClient(t)
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: client, Timeout: time.Second})
	require.NoError(t, err)
	return r, client
}

// syncBoth sends req to Redis through r, then to st at Redis's time
// after the call, and returns the two grants for its one key, neither an
// error, and how long the call took by Redis's clock: the script ran at
// most that long before the time st was given.
func syncBoth(t *testing.T, r *global.Redis, client *redis.Client, st *store, req fleet.Request) (redisGrant, simGrant fleet.Grant, gap time.Duration) {
	t.Helper()
	before, err := client.Time(context.Background()).Result()
	require.NoError(t, err)
	want, err := r.Sync(context.Background(), &req)
	require.NoError(t, err)
	now, err := client.Time(context.Background()).Result()
	require.NoError(t, err)
	gap = now.Sub(before)
	o := &op{req: req}
	st.apply(o, now.UnixMicro())
	redisGrant, simGrant = want.Grants[0], o.resp.Grants[0]
	require.NoError(t, redisGrant.Err)
	require.NoError(t, simGrant.Err)
	return redisGrant, simGrant, gap
}

// TestStoreMatchesRedisReserve is TestStoreMatchesRedis for silent nodes
// reserved for on their ladder: one back from silence in its series
// (charged beyond its reserve), one restarted (a new series: charged in
// full); and one quiet on the key but heard on another, not reserved
// for. The reserve grows with time (1 token a ms), so usage agrees
// within what the calls' time refills: a token or two alone, 6-9 ms'
// worth on a loaded CI under -race. The calls so far, not this one alone:
// the simulator dates each node's last sync at its call's end, Redis
// somewhere within it, and a reserve counts from there (CI run 27: a
// 3.2 ms call at step 2 left steps 3-5 three tokens apart, with this
// step's call under 0.5 ms). By both algorithms: a sliding window
// counts the reserve in its window (before 2026-11-28 it reserved
// nothing).
func TestStoreMatchesRedisReserve(t *testing.T) {
	t.Parallel()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			storeMatchesRedisReserve(t, fleet.Limit{Algorithm: alg, Limit: 1000, Window: time.Second})
		})
	}
}

func storeMatchesRedisReserve(t *testing.T, lim fleet.Limit) {
	fallback := []partition.Step{{Until: 200 * time.Millisecond, Factor: 1}, {Factor: 0.5}}
	steps := []reserveStep{
		{node: "b", u: fleet.Usage{Demand: 1000}},
		{node: "a", u: fleet.Usage{Demand: 300, Series: 1}},
		{node: "d", u: fleet.Usage{Demand: 300, Series: 2}},
		{node: "c", u: fleet.Usage{Demand: 300, Series: 4}, sleep: 250 * time.Millisecond},
		{node: "d", u: fleet.Usage{Key: "elsewhere", Demand: 1}},          // d is heard on another key
		{node: "b", u: fleet.Usage{Consumed: 1000}},                       // a and c reserved for, not d
		{node: "a", u: fleet.Usage{Consumed: 150, Series: 1, Total: 150}}, // back: 150 within its reserve
		{node: "c", u: fleet.Usage{Consumed: 150, Series: 5, Total: 150}}, // restarted: charged in full
		{node: "d", u: fleet.Usage{Consumed: 100, Series: 2, Total: 100}}, // heard throughout: charged in full
	}
	for i := range steps {
		if steps[i].u.Key == "" {
			steps[i].u.Key = "reserve"
		}
	}
	reserveSteps(t, lim, fallback, steps)
}

// reserveStep is one sync of a node, for reserveSteps.
type reserveStep struct {
	node  string
	u     fleet.Usage
	sleep time.Duration // after the step
	least int64         // the least Redis may count, lease included; 0: no bound
	most  int64         // the most; 0: no bound
}

// reserveSteps syncs steps, each with limit lim, with Redis and the
// simulator's store alike, and holds the two to agree on each grant:
// the lease and the node count exactly, usage within what the calls'
// time reserves (a token or two a ms), and usage within each step's
// bounds.
func reserveSteps(t *testing.T, lim fleet.Limit, fallback []partition.Step, steps []reserveStep) {
	t.Helper()
	r, client := realStore(t)
	st := &store{keys: map[string]*lease{}}
	var gaps time.Duration
	for i, s := range steps {
		s.u.Limit = lim
		req := fleet.Request{Node: s.node, Interval: 10 * time.Millisecond, Fallback: fallback, Keys: []fleet.Usage{s.u}}
		w, g, gap := syncBoth(t, r, client, st, req)
		gaps += gap
		what := fmt.Sprintf("step %d (%s %+v, call took %v, %v so far)", i, s.node, s.u, gap, gaps)
		assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
		assert.InDelta(t, w.Used, g.Used, float64(gaps/time.Millisecond)+2, "used: %s", what)
		assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
		if s.least > 0 {
			assert.GreaterOrEqual(t, w.Used, s.least, "used: %s", what)
		}
		if s.most > 0 {
			assert.LessOrEqual(t, w.Used, s.most, "used: %s", what)
		}
		t.Logf("%s: redis used %d lease %d, sim used %d lease %d", what, w.Used, w.Lease, g.Used, g.Lease)
		time.Sleep(s.sleep)
	}
}

// TestStoreMatchesRedisPaced is TestStoreMatchesRedis for a sliding
// window's paced leases (Usage.Paced, Grant.Paced): a node leases the
// whole of one window, spends it, and in the next asks for more than the
// estimate leaves, with pacing and without; then hands back what it did
// not spend. The previous window frees a token a millisecond, so the
// paced part and its span agree within what the call's time frees.
func TestStoreMatchesRedisPaced(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 1000, Window: time.Second}
	// Start 100 ms into a window, so that the next is a known time away.
	now, err := client.Time(context.Background()).Result()
	require.NoError(t, err)
	time.Sleep(time.Second + 100*time.Millisecond - time.Duration(now.UnixMicro()%1e6)*time.Microsecond)
	st := &store{keys: map[string]*lease{}}
	steps := []struct {
		node  string
		u     fleet.Usage
		sleep time.Duration // after the step
		paced bool          // a paced part is expected
	}{
		{"a", fleet.Usage{Demand: 2000, Paced: true}, time.Second + 200*time.Millisecond, false}, // the whole window: nothing to pace ahead
		{"a", fleet.Usage{Consumed: 1000, Demand: 1000, Paced: true}, 0, true},                   // the next: 300 free now, 200 more paced
		{"b", fleet.Usage{Demand: 1000}, 0, false},                                               // unpaced: nothing ahead
		{"a", fleet.Usage{Demand: 1000, Paced: true}, 0, true},                                   // gives the lease and the pace back, leases again
	}
	for i, s := range steps {
		s.u.Key, s.u.Limit = "paced", lim
		req := fleet.Request{Node: s.node, Interval: 100 * time.Millisecond, Keys: []fleet.Usage{s.u}}
		w, g, gap := syncBoth(t, r, client, st, req)
		what := fmt.Sprintf("step %d (%s %+v, call took %v)", i, s.node, s.u, gap)
		t.Logf("%s: redis lease %d paced %d over %v; sim lease %d paced %d over %v", what, w.Lease, w.Paced, w.PacedFor, g.Lease, g.Paced, g.PacedFor)
		slack := float64(gap/time.Millisecond) + 2
		assert.InDelta(t, w.Lease, g.Lease, slack, "lease: %s", what)
		assert.InDelta(t, w.Lease+w.Paced, g.Lease+g.Paced, slack, "lease and paced: %s", what)
		assert.InDelta(t, w.PacedFor, g.PacedFor, float64(gap+time.Millisecond), "paced for: %s", what)
		assert.InDelta(t, w.Used, g.Used, slack, "used: %s", what)
		assert.Equal(t, s.paced, w.Paced > 0, "paced: %s", what)
		if s.paced {
			assert.LessOrEqual(t, w.PacedFor, 200*time.Millisecond, "two intervals at most: %s", what)
		}
		time.Sleep(s.sleep)
	}
}

// TestStoreMatchesRedisRest is TestStoreMatchesRedis for leases granted
// for the key's Hold (fleet.Usage.Hold): a key well under its limit
// rests on a node, which is counted active, its lease live, until the
// lease lapses, though it is silent for longer than the stale horizon;
// a lease beyond its part of a quarter of the burst (a node demanding
// more) stands two intervals; a restarted process (another series) gets nothing back of
// its old resting lease; silent nodes are reserved for on the ladder
// from when their lease lapsed.
func TestStoreMatchesRedisRest(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	// A stale horizon (three intervals) of 60 ms: at 30, one call that
	// took 32 ms under -race in CI (run 135) turned the other nodes stale.
	const interval, hold = 20 * time.Millisecond, 300 * time.Millisecond
	lim := fleet.Limit{Limit: 1000, Window: 24 * time.Hour}
	fallback := []partition.Step{{Until: 200 * time.Millisecond, Factor: 1}, {Factor: 0.5}}
	st := &store{keys: map[string]*lease{}}
	steps := []struct {
		node  string
		u     fleet.Usage
		sleep time.Duration // after the step
		ttl   time.Duration
		nodes int
		used  int64
	}{
		{"a", fleet.Usage{Demand: 100, Series: 1}, 0, hold, 1, 100},
		{"b", fleet.Usage{Demand: 50, Series: 3}, 100 * time.Millisecond, hold, 2, 150},              // within its part, 1,000 / 4 / 2
		{"c", fleet.Usage{Demand: 100}, 0, 2 * interval, 3, 250},                                     // a and b rest: active, their leases out; 100 beyond c's part (1,000 / 4 / 3)
		{"a", fleet.Usage{Consumed: 60, Demand: 100, Series: 1, Total: 60}, 0, 2 * interval, 3, 310}, // a's resting lease is live: 40 back
		{"b", fleet.Usage{Consumed: 10, Demand: 10, Series: 4, Total: 10}, 0, hold, 3, 320},          // b restarted: nothing back of its old lease; 10 within its part, and spent, resting and leased within a quarter: rests
		{"d", fleet.Usage{Demand: 10}, 0, hold, 4, 330},                                              // spent (120), resting (b's 10) and leased within a quarter
		{"e", fleet.Usage{Demand: 10}, 400 * time.Millisecond, hold, 5, 340},
		{"c", fleet.Usage{Consumed: 100, Demand: 10}, 0, 2 * interval, 1, 350}, // every other lease lapsed: c alone, the others reserved for; 350 spent, reserved and leased, over a quarter: no rest
	}
	for i, s := range steps {
		s.u.Key, s.u.Limit, s.u.Hold = "rest", lim, hold
		req := fleet.Request{Node: s.node, Interval: interval, Fallback: fallback, Keys: []fleet.Usage{s.u}}
		w, g, gap := syncBoth(t, r, client, st, req)
		what := fmt.Sprintf("step %d (%s %+v, call took %v)", i, s.node, s.u, gap)
		t.Logf("%s: redis lease %d used %d ttl %v nodes %d; sim lease %d used %d ttl %v nodes %d", what, w.Lease, w.Used, w.TTL, w.Nodes, g.Lease, g.Used, g.TTL, g.Nodes)
		assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
		assert.InDelta(t, w.Used, g.Used, 1, "used: %s", what) // the reserve grows a token a day's 1,000th
		assert.Equal(t, w.TTL, g.TTL, "ttl: %s", what)
		assert.Equal(t, s.ttl, w.TTL, "ttl: %s", what)
		assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
		assert.Equal(t, s.nodes, w.Nodes, "nodes: %s", what)
		assert.InDelta(t, s.used, w.Used, 1, "used: %s", what)
		time.Sleep(s.sleep)
	}
}

// TestStoreMatchesRedisHeard is TestStoreMatchesRedis for a node quiet
// on a key but heard on another past the stale horizon and past keep:
// its lease stays out of the bucket, and it is not forgotten, in the
// store as in the scripts.
func TestStoreMatchesRedisHeard(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	lim := fleet.Limit{Limit: 1000, Window: time.Second}
	fallback := []partition.Step{{Until: 200 * time.Millisecond, Factor: 1}, {Factor: 0.5}}
	st := &store{keys: map[string]*lease{}}
	sync := func(node, key string, u fleet.Usage) (fleet.Grant, fleet.Grant) {
		u.Key, u.Limit = key, lim
		w, g, _ := syncBoth(t, r, client, st, fleet.Request{Node: node, Interval: 10 * time.Millisecond, Fallback: fallback, Keys: []fleet.Usage{u}})
		return w, g
	}
	wa, ga := sync("a", "heard", fleet.Usage{Demand: 500})
	require.Equal(t, wa.Lease, ga.Lease)
	require.Positive(t, wa.Lease)
	wb, gb := sync("b", "heard", fleet.Usage{Demand: 1000})
	require.Equal(t, wb.Lease, gb.Lease)
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		sync("a", "elsewhere", fleet.Usage{Demand: 1})
	}
	w, g := sync("b", "heard", fleet.Usage{Consumed: wb.Lease, Demand: 1000})
	assert.Equal(t, w.Lease, g.Lease, "lease")
	assert.Equal(t, w.Nodes, g.Nodes, "nodes")
	// Within the limit and b's lag, which a lease may take ahead of the
	// bucket (lagOf: a fifth of an interval's refill, 2 here).
	assert.LessOrEqual(t, wa.Lease+w.Lease, lim.Limit+2, "a's lease stays out")
	t.Logf("a holds %d; b leased %d (redis) %d (sim)", wa.Lease, w.Lease, g.Lease)
}

// TestStoreMatchesRedisRestingCut is TestStoreMatchesRedisHeard for a
// node resting on a key (global's TestRestingNodeCutOff): once the key
// is more than a quarter spent, a resting node Redis stopped hearing is
// cut off, its lease out and its share reserved from when last heard;
// one heard elsewhere still rests. By both algorithms: a sliding window
// rests too (until its window's edge), and its window more than a quarter
// counted is hot.
func TestStoreMatchesRedisRestingCut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		alg   local.Algorithm
		heard bool
	}{{local.TokenBucket, false}, {local.TokenBucket, true}, {local.SlidingWindow, false}, {local.SlidingWindow, true}} {
		heard := c.heard
		r, client := realStore(t)
		lim := fleet.Limit{Algorithm: c.alg, Limit: 1000, Window: 10 * time.Second}
		if c.alg == local.SlidingWindow {
			lim.Window = time.Hour // no edge within the test, where a rest would end
		}
		fallback := []partition.Step{{Until: time.Minute, Factor: 1}, {Factor: 0.5}}
		st := &store{keys: map[string]*lease{}}
		sync := func(node, key string, u fleet.Usage) (fleet.Grant, fleet.Grant) {
			u.Key, u.Limit, u.Hold = key, lim, 10*time.Second
			w, g, _ := syncBoth(t, r, client, st, fleet.Request{Node: node, Interval: 10 * time.Millisecond, Fallback: fallback, Keys: []fleet.Usage{u}})
			return w, g
		}
		sync("a", "k", fleet.Usage{Demand: 10, Series: 1})
		sync("b", "k", fleet.Usage{Demand: 10, Series: 2})
		for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if heard {
				sync("a", "other", fleet.Usage{Demand: 1})
			}
		}
		sync("b", "k", fleet.Usage{Consumed: 800, Demand: 100, Series: 2, Total: 800})
		for i := range 3 {
			time.Sleep(10 * time.Millisecond)
			if heard {
				sync("a", "other", fleet.Usage{Demand: 1})
			}
			w, g := sync("b", "k", fleet.Usage{Demand: 100, Series: 2, Total: 800})
			what := fmt.Sprintf("%v, heard %v, b's lease %d", c.alg, heard, i)
			assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
			assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
			assert.InDelta(t, w.Used, g.Used, 1, "used: %s", what)
			want := 2
			if !heard {
				want = 1
			}
			assert.Equal(t, want, w.Nodes, "nodes: %s", what)
		}
	}
}

// TestStoreMatchesRedisRestingCutLapses is global's
// TestRestingNodeCutOffLapses both ways: the reserve for a node cut off
// while it rested runs from when it was last heard, after its lease
// lapsed too.
func TestStoreMatchesRedisRestingCutLapses(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	lim := fleet.Limit{Limit: 1000, Window: 10 * time.Second}
	fallback := []partition.Step{{Until: time.Minute, Factor: 1}, {Factor: 0.5}}
	st := &store{keys: map[string]*lease{}}
	sync := func(node string, u fleet.Usage) (fleet.Grant, fleet.Grant) {
		u.Key, u.Limit, u.Hold = "k", lim, 300*time.Millisecond
		w, g, _ := syncBoth(t, r, client, st, fleet.Request{Node: node, Interval: 10 * time.Millisecond, Fallback: fallback, Keys: []fleet.Usage{u}})
		return w, g
	}
	sync("a", fleet.Usage{Demand: 10, Series: 1})
	sync("b", fleet.Usage{Demand: 10, Series: 2})
	time.Sleep(50 * time.Millisecond)
	sync("b", fleet.Usage{Consumed: 800, Demand: 100, Series: 2, Total: 800})
	for i, pause := range []time.Duration{10, 10, 10, 400, 10} {
		time.Sleep(pause * time.Millisecond)
		w, g := sync("b", fleet.Usage{Demand: 100, Series: 2, Total: 800})
		what := fmt.Sprintf("b's lease %d, %v after the last", i, pause*time.Millisecond)
		assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
		assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
		assert.InDelta(t, w.Used, g.Used, 1, "used: %s", what)
	}
}
