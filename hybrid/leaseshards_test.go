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

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// leaseStamp is when key's lease state was last written by a lease
// script on c, in Redis's microseconds; 0 if never. key must need no
// escaping in a hash tag.
func leaseStamp(t *testing.T, c redis.UniversalClient, key string) int64 {
	t.Helper()
	v, err := c.HGet(context.Background(), global.DefaultPrefix+"{"+key+"}:lease", "ts").Result()
	if err == redis.Nil {
		return 0
	}
	require.NoError(t, err)
	ts, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err)
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
func TestLeaseShardsFleetWide(t *testing.T) {
	t.Parallel()
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

	own := leaseStamp(t, c, key)
	shards := global.ShardKeys(key, 2)
	before := []int64{leaseStamp(t, c, shards[0]), leaseStamp(t, c, shards[1])}
	const run = 4 * time.Second
	r := fleettest.Drive(t, nodes, key, rates, run)
	got, peak := len(r.Admitted), r.MaxInWindow(window)
	rate := float64(limit) * run.Seconds()
	t.Logf("sharded, at twice the limit: admitted %d (per node %v) over %v against %.0f at the limit's rate; busiest window %d against %d",
		got, r.PerNode(), run, rate, peak, limit)
	assert.LessOrEqual(t, leaseStamp(t, c, key), own, "no lease from the key itself while it is split (its state may expire)")
	for i, sh := range shards {
		assert.Greater(t, leaseStamp(t, c, sh), before[i], "shard %d leases", i)
	}
	assert.Equal(t, []int{2, 2, 2, 2, 2, 2, 2, 2}, shardsOf(nodes, key), "still split")
	// Unsharded, this fleet's busiest window measured 2,044-2,047.
	assert.LessOrEqual(t, float64(peak), limit*1.05, "admitted in one window")
	assert.LessOrEqual(t, float64(got), rate*1.01, "admitted overall")
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
		return (merged > 0 && now > merged+2*window) || now > 10*time.Second
	})
	require.NotZero(t, merged, "the two nodes left merge back once the mark lapses")
	across, after := r.MaxInWindow(window), r.MaxInWindowFrom(window, merged+window)
	t.Logf("merged %v after the renewing nodes left; busiest window across the merge %d, a window after it %d",
		merged.Round(time.Millisecond), across, after)
	// The leaving nodes handed back what they had not spent of their
	// leases, and the last interval of the mark leased nothing; the two
	// left may spend both on top of the rate. A merge that handed out a
	// fresh bucket would admit up to twice the limit.
	assert.LessOrEqual(t, float64(across), limit*1.2, "no burst at the merge")
	assert.LessOrEqual(t, float64(after), limit*1.05, "the key holds the limit after the merge")
	assert.Greater(t, leaseStamp(t, c, key), own, "the key itself leases again")
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
	const interval = 50 * time.Millisecond
	s := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: 10_000_000, Window: time.Hour}
	nodes := fleettest.Limiters(t, 8, func(i int) hybrid.Config {
		hot := 1.0
		if i >= 4 {
			hot = -1
		}
		return hybrid.Config{Policies: []hybrid.Policy{p}, Syncer: redisSyncer(t, s), Interval: interval,
			HotLeaseSyncs: hot, ManualSync: true}
	})
	const key, perStep = "acct", 50
	admitted := 0
	step := func(active []*hybrid.Limiter) {
		for _, l := range active {
			for range perStep {
				d, err := l.Allow(key)
				require.NoError(t, err)
				if d.Allowed() {
					admitted++
				}
			}
			require.NoError(t, l.SyncOnce(context.Background()))
			require.NoError(t, l.SyncEarly(context.Background()))
		}
		time.Sleep(interval)
	}
	split := 0
	for ; split < 40 && !slices.Equal(shardsOf(nodes, key), []int{2, 2, 2, 2, 2, 2, 2, 2}); split++ {
		step(nodes)
	}
	require.Equal(t, []int{2, 2, 2, 2, 2, 2, 2, 2}, shardsOf(nodes, key), "split")
	for range 10 {
		step(nodes)
	}
	for _, l := range nodes[:4] {
		require.NoError(t, l.Close())
	}
	left := nodes[4:]
	merged := 0
	for ; merged < 60 && !slices.Equal(shardsOf(left, key), []int{0, 0, 0, 0}); merged++ {
		step(left)
	}
	require.Equal(t, []int{0, 0, 0, 0}, shardsOf(left, key), "merged")
	for range 5 {
		step(left)
	}
	for _, l := range left {
		require.NoError(t, l.Close())
	}
	r := redisSyncer(t, s)
	used, err := r.LeaseUsed(context.Background(), []string{key}, global.Limit{Algorithm: global.SlidingWindow, Limit: p.Limit, Window: p.Window})
	require.NoError(t, err)
	// A lease is sized for an interval at the node's rate, with
	// headroom, and an early sync adds to it: measured 130-190 a node at
	// the split. Counting a report twice would add the whole of what was
	// admitted.
	slack := 2 * 8 * 4 * perStep
	t.Logf("admitted %d; the key shows %d spent (split after %d steps, merged %d steps after the splitting nodes left)", admitted, used, split, merged)
	assert.GreaterOrEqual(t, used, int64(admitted), "nothing leaked across the split and the merge")
	assert.LessOrEqual(t, used, int64(admitted+slack), "nothing counted twice beyond the outstanding leases")
}
