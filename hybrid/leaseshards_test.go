package hybrid_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// leaseStamp is when the lease state of key's shard (the zero Shard: key
// itself) was last written by a lease script on c, in Redis's
// microseconds; 0 if never.
func leaseStamp(t *testing.T, c redis.UniversalClient, key string, sh fleet.Shard) int64 {
	t.Helper()
	ts, _ := hgetShardInt(t, c, key, sh, "ts")
	return ts
}

// shardsOf returns the shard count each node reports for key.
func shardsOf(nodes []*hybrid.Limiter, key string) []int {
	out := make([]int, len(nodes))
	for i, l := range nodes {
		for _, h := range l.HotKeys() {
			if h.Key == key {
				out[i] = h.Shards
			}
		}
	}
	return out
}

// TestLeaseShardsFleetWide runs eight nodes on one real Redis at twice a
// Hybrid key's limit. Half of them split keys by their sync load, half
// never do by themselves (HotLeaseSyncs -1): all eight must lease from the shards the first
// split made, none from the key itself, and the fleet must still admit
// the limit and no more. Then the splitting nodes leave, nobody renews
// the mark, and the two nodes left merge back onto the key, with no burst
// at the merge.
//
// Not parallel with the package's other tests: its busiest window, 1-3%
// under its bound alone (2,047-2,131 against 2,160), passed it twice in
// CI runs beside them (2,188 and 2,259), where its eight nodes' sync
// loops ran late among the others' goroutines.
func TestLeaseShardsFleetWide(t *testing.T) {
	const (
		limit  = 2000
		window = time.Second
	)
	s := redistest.StartServer(t)
	c := s.Client(t)
	p := hybrid.Policy{Name: "api", Limit: limit, Window: window}
	nodes := fleettest.Limiters(t, 8, func(i int) hybrid.Config {
		hot := 40.0 // eight nodes syncing every 100 ms are 80 a second
		if i >= 4 {
			hot = -1
		}
		return hybrid.Config{Policies: []hybrid.Policy{p}, Syncer: redisSyncer(t, s), Interval: 100 * time.Millisecond, HotLeaseSyncs: hot}
	})
	rates := make([]float64, len(nodes))
	for i := range rates {
		rates[i] = 2 * limit / float64(len(nodes))
	}
	const key = "tenant"
	all := func(n int) bool {
		for _, got := range shardsOf(nodes, key) {
			if got != n {
				return false
			}
		}
		return true
	}
	fleettest.DriveUntil(t, nodes, key, rates, func(now time.Duration) bool { return all(2) || now > 5*time.Second })
	require.Equal(t, []int{2, 2, 2, 2, 2, 2, 2, 2}, shardsOf(nodes, key), "every node leases from a quarter as many shards as nodes")

	// Spend what the key held when it was split, so that what the fleet
	// admits next is its rate.
	fleettest.Drive(t, nodes, key, rates, 2*time.Second)

	own := leaseStamp(t, c, key, fleet.Shard{})
	shards := fleet.ShardsOf(key, 2)
	before := []int64{leaseStamp(t, c, key, shards[0]), leaseStamp(t, c, key, shards[1])}
	const run = 4 * time.Second
	r := fleettest.Drive(t, nodes, key, rates, run)
	got, peak := len(r.Admitted), r.MaxInWindow(window)
	rate := float64(limit) * run.Seconds()
	t.Logf("sharded, at twice the limit: admitted %d (per node %v) over %v against %.0f at the limit's rate; busiest window %d against %d",
		got, r.PerNode(), run, rate, peak, limit)
	assert.LessOrEqual(t, leaseStamp(t, c, key, fleet.Shard{}), own, "no lease from the key itself while it is split (its state may expire)")
	for i, sh := range shards {
		assert.Greater(t, leaseStamp(t, c, key, sh), before[i], "shard %d leases", i)
	}
	assert.Equal(t, []int{2, 2, 2, 2, 2, 2, 2, 2}, shardsOf(nodes, key), "still split")
	// The leases the nodes held when the run began are spent in it, on
	// top of the rate; with top-ups from the next shard they are a
	// little larger than unsharded. Measured: 7,987-8,094 admitted and
	// busiest windows of 2,047-2,112; the same fleet unsharded, 7,979-
	// 8,007 and 2,044-2,047.
	assert.LessOrEqual(t, float64(peak), limit*1.08, "admitted in one window")
	assert.LessOrEqual(t, float64(got), rate*1.02, "admitted overall")
	assert.GreaterOrEqual(t, float64(got), rate*0.97, "the shards strand nothing")
	for _, n := range r.PerNode() {
		assert.Greater(t, n, 0, "every node is served")
	}

	// The nodes that renew the mark leave, and two of the others.
	for _, l := range nodes[:6] {
		require.NoError(t, l.Close())
	}
	left := nodes[6:]
	merged := time.Duration(0)
	r = fleettest.DriveUntil(t, left, key, []float64{limit, limit}, func(now time.Duration) bool {
		if merged == 0 && len(left[0].HotKeys())+len(left[1].HotKeys()) == 0 {
			merged = now
		}
		return (merged > 0 && now > merged+5*window/2) || now > 10*time.Second
	})
	require.NotZero(t, merged, "the two nodes left merge back once the mark lapses")
	across, after := r.MaxInWindow(window), r.MaxInWindowFrom(window, merged+window)
	t.Logf("merged %v after the renewing nodes left; busiest window across the merge %d, a window after it %d",
		merged.Round(time.Millisecond), across, after)
	// The leaving nodes handed back what they had not spent of their
	// leases, and the last interval of the mark leased nothing; the two
	// left may spend both on top of the rate, then or later (measured:
	// 2,114-2,276 across the merge, 1,913-2,109 in the windows after).
	// A merge that handed out a fresh bucket would admit up to twice the
	// limit.
	assert.LessOrEqual(t, float64(across), limit*1.2, "no burst at the merge")
	assert.LessOrEqual(t, float64(after), limit*1.1, "the key holds the limit after the merge")
	assert.Greater(t, leaseStamp(t, c, key, fleet.Shard{}), own, "the key itself leases again")
}

// stepInterval is the sync interval of the hand-driven lease shard
// tests.
const stepInterval = 50 * time.Millisecond

// manualConfig returns node i's Config in a hand-driven (ManualSync)
// fleet on s with the one policy p: the first hot nodes split keys by
// their sync load, the others only follow. SyncTimeout is five
// intervals, so that a loaded machine does not fail a sync.
func manualConfig(t *testing.T, s *redistest.Server, p hybrid.Policy, hot int) func(i int) hybrid.Config {
	return func(i int) hybrid.Config {
		rate := 1.0
		if i >= hot {
			rate = -1
		}
		return hybrid.Config{Policies: []hybrid.Policy{p}, Syncer: redisSyncer(t, s), Interval: stepInterval,
			SyncTimeout: 5 * stepInterval, HotLeaseSyncs: rate, ManualSync: true}
	}
}

// steps drives ManualSync nodes by hand for the lease shard tests.
type steps struct {
	t        *testing.T
	key      string
	admitted int
}

// step offers per requests of the key to each of active, runs its
// regular and early syncs, and waits an interval; it returns what it
// admitted. If stop is not nil, it is asked before each node, and the
// step ends, reporting so, when it says to.
func (st *steps) step(active []*hybrid.Limiter, per int, stop func() bool) (got int, stopped bool) {
	t := st.t
	t.Helper()
	defer func() { st.admitted += got }()
	for _, l := range active {
		if stop != nil && stop() {
			return got, true
		}
		for range per {
			d, err := l.Allow(st.key)
			require.NoError(t, err)
			if d.Allowed() {
				got++
			}
		}
		require.NoError(t, l.SyncOnce(context.Background()))
		require.NoError(t, l.SyncEarly(context.Background()))
	}
	time.Sleep(stepInterval)
	return got, false
}

// run steps active with per requests each, n times.
func (st *steps) run(active []*hybrid.Limiter, per, n int) {
	for range n {
		st.step(active, per, nil)
	}
}

// until steps active with per requests each until every one of them
// leases the key from want shards (0: from the key itself), for at most
// most steps, and returns how many it took; the test fails, saying what,
// if they never do.
func (st *steps) until(active []*hybrid.Limiter, per, most, want int, what string) int {
	st.t.Helper()
	for i := 0; i < most; i++ {
		if slices.Equal(shardsOf(active, st.key), slices.Repeat([]int{want}, len(active))) {
			return i
		}
		st.step(active, per, nil)
	}
	require.Equal(st.t, slices.Repeat([]int{want}, len(active)), shardsOf(active, st.key), what)
	return most
}

// untilDry steps active with per requests each until n steps in a row
// admit nothing: the quota is spent.
func (st *steps) untilDry(active []*hybrid.Limiter, per, n int) {
	for dry := 0; dry < n; {
		if got, _ := st.step(active, per, nil); got == 0 {
			dry++
		} else {
			dry = 0
		}
	}
}

// TestLeaseShardAccounting checks that every admission is counted once
// across a split and a merge: eight nodes on one real Redis spend a key
// that never runs short, it is split, the nodes that split it leave, and
// the rest merge back and leave too. What the key then shows spent must
// be at least what was admitted (nothing leaked between the key and its
// shards) and at most that plus the leases that were outstanding at the
// split and at the merge, which are counted as spent whether or not they
// were.
func TestLeaseShardAccounting(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: 10_000_000, Window: time.Hour}
	nodes := fleettest.Limiters(t, 8, manualConfig(t, s, p, 4))
	const perStep = 50
	st := &steps{t: t, key: "acct"}
	split := st.until(nodes, perStep, 40, 2, "split")
	st.run(nodes, perStep, 10)
	for _, l := range nodes[:4] {
		require.NoError(t, l.Close())
	}
	left := nodes[4:]
	merged := st.until(left, perStep, 60, 0, "merged")
	st.run(left, perStep, 5)
	for _, l := range left {
		require.NoError(t, l.Close())
	}
	used, err := redisStore(t, s).LeaseUsed(context.Background(), st.key, []fleet.Shard{{}}, fleet.Limit{Algorithm: local.SlidingWindow, Limit: p.Limit, Window: p.Window})
	require.NoError(t, err)
	// A lease is sized for an interval at the node's rate, with
	// headroom, and an early sync adds to it; while the key is far under
	// its limit it is at least the node's part of what is free beyond a
	// quarter of the limit, up to
	// what the limit refills in two intervals (most). The leases
	// outstanding at the split (8 nodes) and at the merge (4) are
	// counted as spent: measured 3,100 over what was admitted. Charging
	// the pre-split leases again at the merge would add 8 more leases;
	// counting a report twice, the whole of what was admitted.
	most := int(p.Limit * int64(2*stepInterval) / int64(p.Window))
	slack := (8 + 4) * (most + 4*perStep)
	t.Logf("admitted %d; the key shows %d spent (split after %d steps, merged %d steps after the splitting nodes left)", st.admitted, used, split, merged)
	assert.GreaterOrEqual(t, used, int64(st.admitted), "nothing leaked across the split and the merge")
	assert.LessOrEqual(t, used, int64(st.admitted+slack), "nothing counted twice beyond the outstanding leases")
}

// hgetInt reads field of key's lease state on c, and whether it is there.
// key must need no escaping in a hash tag.
func hgetInt(t *testing.T, c redis.UniversalClient, key, field string) (int64, bool) {
	t.Helper()
	return hgetShardInt(t, c, key, fleet.Shard{}, field)
}

// hgetShardInt is hgetInt on the lease state of key's shard.
func hgetShardInt(t *testing.T, c redis.UniversalClient, key string, sh fleet.Shard, field string) (int64, bool) {
	t.Helper()
	v, err := c.HGet(context.Background(), redisPrefix+"{"+key+sh.String()+"}:lease", field).Result()
	if err == redis.Nil {
		return 0, false
	}
	require.NoError(t, err)
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err)
	return n, true
}

// TestLeaseMergeForgetsSplitLeases merges a key back from its shards,
// one node at a time, and reads what each node's first report charges
// the key beyond its new lease. The leases the key held for the nodes at
// the split were counted then (and charged to the shards), so the merge
// charge forgets them: a node that spent nothing since must charge
// nothing, where a report against its old lease would charge it again.
// And a node that still holds a shard lease when another node has merged
// reports only what it spent beyond that lease, which the merge charge
// counted.
func TestLeaseMergeForgetsSplitLeases(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	p := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: 10_000_000, Window: time.Hour}
	nodes := fleettest.Limiters(t, 8, manualConfig(t, s, p, 1))
	st := &steps{t: t, key: "dbl"}
	st.until(nodes, 50, 40, 2, "split")
	st.run(nodes, 50, 1)
	// Node 8 stops here, holding a lease from its home shard.
	holder := nodes[7]
	held := int64(0)
	for _, sh := range fleet.ShardsOf(st.key, 2) {
		l, _ := hgetShardInt(t, c, st.key, sh, "l:node-8")
		held += l
	}
	require.Positive(t, held, "node 8 holds a shard lease")
	// Node 1, the only one that renews, stops syncing too (it left, or
	// is paused or cut off); the others spend nothing from now on.
	left := nodes[1:7]
	st.run(left, 0, 3)
	first, checked := "", 0 // the first node to merge charges the key with the shards
	for i := 0; i < 60 && !slices.Equal(shardsOf(left, st.key), make([]int, len(left))); i++ {
		for j, l := range left {
			n := "node-" + strconv.Itoa(j+2)
			cur0, _ := hgetInt(t, c, st.key, "cur")
			hadShards := shardsOf([]*hybrid.Limiter{l}, st.key)[0] > 0
			require.NoError(t, l.SyncOnce(context.Background()))
			if !hadShards || shardsOf([]*hybrid.Limiter{l}, st.key)[0] > 0 {
				continue
			}
			cur1, _ := hgetInt(t, c, st.key, "cur")
			lease, _ := hgetInt(t, c, st.key, "l:"+n)
			if first == "" {
				first = n
				continue
			}
			checked++
			require.Zero(t, cur1-cur0-lease, "%s spent nothing since the split, yet its first report to the key charged %d", n, cur1-cur0-lease)
		}
		time.Sleep(stepInterval)
	}
	require.NotEmpty(t, first, "a node merged")
	require.Equal(t, len(left)-1, checked, "every node merged, and all but the first were checked")

	// Node 8 spends part of the lease it still holds, then merges.
	spent := admit(t, holder, st.key, int(held/2))
	require.Positive(t, spent)
	cur0, _ := hgetInt(t, c, st.key, "cur")
	require.NoError(t, holder.SyncOnce(context.Background()))
	require.Empty(t, holder.HotKeys(), "node 8 merged")
	cur1, _ := hgetInt(t, c, st.key, "cur")
	lease, _ := hgetInt(t, c, st.key, "l:node-8")
	t.Logf("node 8 held %d at its shard, spent %d of it, and its first report to the key charged %d beyond its new lease",
		held, spent, cur1-cur0-lease)
	assert.Zero(t, cur1-cur0-lease, "what node 8 spent came from a shard lease the merge charge counted")
}

// TestLeaseLateRenewal has the only node that renews a split miss its
// syncs until the mark lapses and the others merge and spend from the
// key; then it comes back, still hot. A renewal then must not bring the
// mark back, which would send the fleet to shards never charged with what
// the key handed out meanwhile (measured before the fix: 25,312 admitted
// against 20,000); the key is split anew, with the split's charges.
func TestLeaseLateRenewal(t *testing.T) {
	t.Parallel()
	const limit = 20_000
	s := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: limit, Window: time.Hour}
	nodes := fleettest.Limiters(t, 8, manualConfig(t, s, p, 1))
	st := &steps{t: t, key: "lapse"}
	st.until(nodes, 50, 40, 2, "split")
	t.Logf("split; admitted so far %d", st.admitted)
	// node-1, the only renewer, misses its syncs for a while.
	left := nodes[1:]
	st.until(left, 50, 60, 0, "merged")
	st.run(left, 50, 20)
	t.Logf("merged and spent from the key; admitted so far %d", st.admitted)
	// node-1 is back, still hot.
	require.NoError(t, nodes[0].SyncOnce(context.Background()))
	st.until(nodes, 0, 10, 2, "split again")
	st.untilDry(nodes, 100, 10)
	for _, l := range nodes {
		require.NoError(t, l.Close())
	}
	t.Logf("admitted %d against a limit of %d per hour", st.admitted, limit)
	assert.LessOrEqual(t, st.admitted, limit*105/100, "admitted within the hour")
}

// TestLeaseNewNodeAfterMarkEnds has eight nodes split a key and spend
// the whole limit on its shards. The only renewer stops, and the mark
// runs out. A node that holds no state for the key (a new node, or one
// whose key was forgotten as idle) then syncs before the others' next
// sync, that is before any merge charge: it must not lease from the
// key's state as the split froze it. Before the mark outlived its end
// until a merge, the fleet admitted 36,891 against 20,000 this way.
func TestLeaseNewNodeAfterMarkEnds(t *testing.T) {
	t.Parallel()
	const limit = 20_000
	s := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: limit, Window: time.Hour}
	mk := manualConfig(t, s, p, 1)
	nodes := fleettest.Limiters(t, 8, mk)
	dir := redisStore(t, s)
	st := &steps{t: t, key: "gap"}
	// markLeft is the split's mark's time left, and whether it stands
	// (not yet merged away).
	markLeft := func() (time.Duration, bool) {
		n, left, err := dir.LeaseShardMark(context.Background(), st.key)
		require.NoError(t, err)
		return left, n > 0
	}
	markEnded := func() bool { left, ok := markLeft(); return ok && left == 0 }
	// nearEnd reports whether the mark has at most three steps left: the
	// others stop syncing then, so that none hears the end and merges
	// before the new node comes (polling for the end itself between
	// nodes raced with a node merging, on a loaded machine).
	nearEnd := func() bool { left, ok := markLeft(); return ok && left <= 3*stepInterval }
	st.until(nodes, 50, 40, 2, "split")
	st.untilDry(nodes, 300, 5)
	t.Logf("shards spent dry; admitted %d of %d", st.admitted, limit)
	// node-1, the only renewer, stops; the others keep syncing (no
	// traffic) until the mark nearly runs out, then wait out the rest.
	left := nodes[1:]
	for i := 0; i < 100; i++ {
		if _, near := st.step(left, 0, nearEnd); near {
			break
		}
	}
	rest, _ := markLeft()
	time.Sleep(rest + stepInterval)
	require.True(t, markEnded(), "the mark ran out")
	require.Equal(t, []int{2, 2, 2, 2, 2, 2, 2}, shardsOf(left, st.key), "nobody merged yet")
	// A node with no state for the key syncs now.
	n9 := fleettest.Limiters(t, 1, func(int) hybrid.Config {
		cfg := mk(1)
		cfg.Node = "node-9"
		return cfg
	})[0]
	late := 0
	for range 3 { // within one interval: one regular sync, early syncs after
		late += admit(t, n9, st.key, 5000)
		require.NoError(t, n9.SyncOnce(context.Background()))
		time.Sleep(n9.EarlyGap())
	}
	st.admitted += late
	t.Logf("node-9 admitted %d in the gap", late)
	// Now the others merge, and everyone spends what is left.
	st.untilDry(append(slices.Clone(left), n9), 300, 5)
	t.Logf("admitted %d against a limit of %d per hour", st.admitted, limit)
	assert.LessOrEqual(t, st.admitted, limit*105/100, "admitted within the hour")
}
