package hybrid_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// bucketStore is a Strict store in memory: a GCRA bucket per key name
// (a shard's named key + Shard.String()), as Redis keeps one per key,
// and shard marks, on the test's clock, as global.Redis keeps them. It
// counts calls per name. Real Redis runs the
// same contract in global's TestMarkShards and TestChargeAtLeast, and
// under a fleet in TestStrictShardsFleetWide.
type bucketStore struct {
	*scripted
	clk   *clock.Manual
	mu    sync.Mutex
	lims  map[string]*local.Limiter
	calls map[string]int
	marks map[string]mark
}

type mark struct {
	shards int
	until  time.Time
}

var _ store.ShardDirectory = (*bucketStore)(nil)

func newBucketStore() *bucketStore {
	return &bucketStore{scripted: newScripted(0), lims: map[string]*local.Limiter{}, calls: map[string]int{}, marks: map[string]mark{}}
}

func (s *bucketStore) MarkShards(_ context.Context, key string, shards int, ttl time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.marks[key]; ok && s.clk.Now().Before(m.until) {
		shards = m.shards
	}
	s.marks[key] = mark{shards, s.clk.Now().Add(ttl)}
	return shards, nil
}

func (s *bucketStore) ChargeShardAtLeast(ctx context.Context, key string, sh fleet.Shard, lim fleet.Limit, used int64) error {
	return s.ChargeAtLeast(ctx, key+sh.String(), lim, used)
}

func (s *bucketStore) AllowShard(ctx context.Context, key string, sh fleet.Shard, lim fleet.Limit, n int64) (store.Decision, error) {
	return s.Allow(ctx, key+sh.String(), lim, n)
}

func (s *bucketStore) ChargeAtLeast(_ context.Context, key string, lim fleet.Limit, used int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.bucket(key, lim)
	if err != nil {
		return err
	}
	r, _ := l.AllowN(key, 0)
	capacity := lim.Burst
	if capacity == 0 {
		capacity = lim.Limit
	}
	if spent := capacity - r.Remaining(); used > spent {
		_, err = l.AllowN(key, int(min(used-spent, int64(r.Remaining()))))
	}
	return err
}

func (s *bucketStore) Allow(_ context.Context, key string, lim fleet.Limit, n int64) (store.Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.marks[key]; ok && s.clk.Now().Before(m.until) {
		return store.Decision{Shards: m.shards, ShardedFor: m.until.Sub(s.clk.Now())}, nil
	}
	l, err := s.bucket(key, lim)
	if err != nil {
		return store.Decision{}, err
	}
	s.calls[key]++
	r, err := l.AllowN(key, int(n))
	return store.Decision{Allowed: r.Allowed(), Remaining: r.Remaining(), RetryAfter: r.RetryAfter()}, err
}

func (s *bucketStore) bucket(key string, lim fleet.Limit) (*local.Limiter, error) {
	l := s.lims[key]
	if l == nil {
		var err error
		l, err = local.New(local.Config{Limit: lim.Limit, Window: lim.Window, Burst: lim.Burst, Clock: s.clk})
		if err != nil {
			return nil, err
		}
		s.lims[key] = l
	}
	return l, nil
}

func (s *bucketStore) shardCalls(key string) (own int, shards map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	shards = map[string]int{}
	for k, n := range s.calls {
		switch {
		case k == key:
			own += n
		case strings.HasPrefix(k, key+"%#"):
			shards[k] += n
		}
	}
	return own, shards
}

// TestStrictShards drives a Strict key hot: it is sharded, its decisions
// spread evenly over the shards, the fleet admits what one key would
// within 1% of its limit, and once cold it merges back with no burst.
func TestStrictShards(t *testing.T) {
	t.Parallel()
	var ownMerged int // the key's own calls when it had merged back
	run := func(shards int) (admitted []int, store *bucketStore) {
		store = newBucketStore()
		l, clk := manual(t, hybrid.Config{Syncer: store, HotKeyRate: 100, HotKeyShards: shards,
			Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 4000, Window: time.Second}}})
		store.clk = clk
		for i := range 80 {
			offered := 600 // 6,000/s against 4,000/s
			if i >= 40 && i < 60 {
				offered = 0 // cold: merges back
			}
			got := 0
			for range offered {
				clk.Advance(time.Millisecond / 6)
				if d, err := l.Allow("k"); err == nil && d.Allowed() {
					got++
				}
			}
			admitted = append(admitted, got)
			clk.Set(epoch.Add(time.Duration(i+1) * 100 * time.Millisecond))
			require.NoError(t, l.SyncOnce(context.Background()))
			if i == 10 && shards > 1 {
				hot := l.HotKeys()
				require.Len(t, hot, 1, "sharded by now")
				assert.Equal(t, 4, hot[0].Shards)
			}
			if i == 59 && shards > 1 {
				assert.Empty(t, l.HotKeys(), "merged back")
				ownMerged, _ = store.shardCalls("k")
			}
		}
		return admitted, store
	}
	single, _ := run(1)
	sharded, store := run(4)
	sum := func(xs []int) (n int) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	t.Logf("admitted over 8 s: one key %d, sharded %d (limit 4,000/s)", sum(single), sum(sharded))
	assert.InDelta(t, sum(single), sum(sharded), 0.01*4000*8, "within 1%% of the limit over the run")

	own, shards := store.shardCalls("k")
	require.Len(t, shards, 4)
	var calls []int
	for _, n := range shards {
		calls = append(calls, n)
	}
	for _, n := range calls {
		assert.InDelta(t, calls[0], n, float64(calls[0])*0.1, "round-robin: even shards %v", calls)
	}
	// Hot again at once, the key is split again after its first interval
	// back (600 decisions).
	assert.Greater(t, own, ownMerged, "after the merge, decisions go to the key's own bucket again")
}

// TestStrictShardMergeNoBurst merges a sharded key back while its quota
// is still spent (a slow refill: 2,000 per 10 s): the key's own bucket,
// idle while the shards served, must not hand out a fresh burst.
func TestStrictShardMergeNoBurst(t *testing.T) {
	t.Parallel()
	run := func(shards int) int {
		store := newBucketStore()
		l, clk := manual(t, hybrid.Config{Syncer: store, HotKeyRate: 100, HotKeyShards: shards,
			Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 2000, Window: 10 * time.Second}}})
		store.clk = clk
		step := func(i, offered int) (got int) {
			for range offered {
				clk.Advance(100 * time.Millisecond / time.Duration(offered+1))
				if d, err := l.Allow("k"); err == nil && d.Allowed() {
					got++
				}
			}
			clk.Set(epoch.Add(time.Duration(i+1) * 100 * time.Millisecond))
			require.NoError(t, l.SyncOnce(context.Background()))
			return got
		}
		i := 0
		for ; i < 40; i++ {
			step(i, 100) // 1,000/s: hot, and the quota is spent
		}
		if shards > 1 {
			require.Len(t, l.HotKeys(), 1)
		}
		for ; i < 55; i++ {
			step(i, 5) // 50/s: not hot; merges back after a second
		}
		if shards > 1 {
			require.Empty(t, l.HotKeys(), "merged back")
		}
		return step(i, 1000) // a burst right after the merge
	}
	single, sharded := run(1), run(4)
	t.Logf("a burst of 1,000 right after the merge: one key admits %d, the merged key %d", single, sharded)
	assert.LessOrEqual(t, sharded, single+50, "the merged key's bucket holds what the shards had left, not a fresh burst")
	// The clock is manual: the merged key admits what one key does.
	// Without the merge charge it admitted 295 against 245 (the renewal
	// charges covered the rest); without both, 1,000.
	assert.InDelta(t, single, sharded, 10, "as one key does")
}

// TestStrictShardsFleetWide runs two nodes on one real Redis: a hot
// tenant's traffic makes node A shard its key, while node B, which sees
// little of it and never shards on its own (HotKeyRate -1), must follow
// the fleet's mark onto the shards. Were B to decide on the key itself,
// the two would each see the whole limit and admit up to twice it.
func TestStrictShardsFleetWide(t *testing.T) {
	t.Parallel()
	const limit = 1000 // per second, burst as much
	s := redistest.StartServer(t)
	node := func(name string, hot float64) *hybrid.Limiter {
		return fleettest.Limiters(t, 1, func(int) hybrid.Config {
			return hybrid.Config{Node: name, Syncer: redisSyncer(t, s), Interval: 50 * time.Millisecond, HotKeyRate: hot,
				Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: limit, Window: time.Second}}}
		})[0]
	}
	a, b := node("a", 200), node("b", -1)

	// offer sends rate requests a second to l for d and returns how many
	// Redis admitted. Decisions a timed-out round trip left to the
	// node's fail-static bucket (a loaded machine) are the outage
	// model's, not the shards', and are counted apart.
	var degraded atomic.Int64
	offer := func(l *hybrid.Limiter, rate float64, d time.Duration) int {
		start, sent, admitted := time.Now(), 0, 0
		for el := time.Duration(0); el < d; el = time.Since(start) {
			for ; sent < int(el.Seconds()*rate); sent++ {
				dec, err := l.Allow("tenant")
				switch {
				case err != nil || !dec.Allowed():
				case dec.Degraded():
					degraded.Add(1)
				default:
					admitted++
				}
			}
			time.Sleep(time.Millisecond)
		}
		return admitted
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(a.HotKeys()) == 0 && time.Now().Before(deadline) {
		offer(a, 1500, 100*time.Millisecond)
	}
	require.Len(t, a.HotKeys(), 1, "A sharded the key")
	offer(a, 1500, 2500*time.Millisecond) // spends the shards' starting burst

	// A loaded machine may not have spent it all: what the shards still
	// hold may be admitted on top of the rate.
	r := redisStore(t, s)
	per := fleet.Limit{Limit: limit / hybrid.DefaultHotKeyShards, Window: time.Second}
	left := int64(0)
	for _, sh := range fleet.ShardsOf("tenant", hybrid.DefaultHotKeyShards) {
		d, err := r.AllowShard(context.Background(), "tenant", sh, per, 0)
		require.NoError(t, err)
		left += d.Remaining
	}

	const run = 2 * time.Second
	var wg sync.WaitGroup
	var gotA, gotB int
	var hot [][]hybrid.HotKey // B's, sampled over the run
	start := time.Now()
	wg.Go(func() { gotA = offer(a, 1500, run) })
	wg.Go(func() { gotB = offer(b, 500, run) })
	wg.Go(func() {
		for range 4 {
			time.Sleep(run / 5)
			hot = append(hot, b.HotKeys())
		}
	})
	wg.Wait()
	// On a loaded machine the two runs end late, and the shards refill
	// meanwhile: the limit holds over the time they took.
	took := time.Since(start)
	total := gotA + gotB
	t.Logf("over %v at 2× the limit: A admitted %d, B %d, together %d against %d and %d the shards held at the start (and %d by fail-static buckets, over the whole test)",
		took.Round(time.Millisecond), gotA, gotB, total, int(limit*took.Seconds()), left, degraded.Load())
	for i, h := range hot {
		require.Len(t, h, 1, "B follows the fleet onto the shards, sample %d", i)
		assert.Equal(t, hybrid.DefaultHotKeyShards, h[0].Shards)
	}
	assert.LessOrEqual(t, float64(total), 1.05*(limit*took.Seconds()+float64(left)), "one limit for the fleet, not one per node")
	assert.Positive(t, gotB, "B is served")
}

// TestShardMarkLost wipes the store (a Redis restarted empty) while node
// B follows node A's mark: B must be back on the key itself within two
// intervals, not after the ten the mark had left, or B on the shards and
// any other node on the key would each see the whole limit.
func TestShardMarkLost(t *testing.T) {
	t.Parallel()
	store := newBucketStore()
	clk := clock.NewManual(epoch)
	store.clk = clk
	node := func(name string, hot float64) *hybrid.Limiter {
		return fleettest.Limiters(t, 1, func(int) hybrid.Config {
			return hybrid.Config{Node: name, Syncer: store, Clock: clk, ManualSync: true, Interval: 100 * time.Millisecond,
				HotKeyRate: hot, Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: 4000, Window: time.Second}}}
		})[0]
	}
	a, b := node("a", 100), node("b", -1)
	step := func(offer map[*hybrid.Limiter]int) {
		for l, n := range offer {
			for range n {
				_, _ = l.Allow("k")
			}
		}
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, a.SyncOnce(context.Background()))
		require.NoError(t, b.SyncOnce(context.Background()))
	}
	for range 5 {
		step(map[*hybrid.Limiter]int{a: 300, b: 10})
	}
	require.Len(t, b.HotKeys(), 1, "B follows A's mark")

	store.mu.Lock()
	clear(store.marks) // Redis restarted empty; A has gone quiet
	store.mu.Unlock()
	for range 2 {
		step(map[*hybrid.Limiter]int{b: 10})
	}
	assert.Empty(t, b.HotKeys(), "B is back on the key within two intervals")
	own, _ := store.shardCalls("k")
	_, err := b.Allow("k")
	require.NoError(t, err)
	own2, _ := store.shardCalls("k")
	assert.Equal(t, own+1, own2, "and decides there")
}

// TestShardNamesUnreachable is an attack on a real Redis: a Strict key,
// tenant:victim, is split into shards across the fleet, and a client
// spends, within its own limit, on keys spelt as the victim's shards
// once were (the key, '#', a number), and as they might be (with '%#',
// or '%' spelt %25). No user key may reach a shard: the victim must
// still be admitted its whole limit. When a shard's name was the key
// and '#', the victim was held to a handful of its 120.
func TestShardNamesUnreachable(t *testing.T) {
	t.Parallel()
	const limit, victim = 120, "tenant:victim"
	s := redistest.StartServer(t)
	l := fleettest.Limiters(t, 1, func(int) hybrid.Config {
		return hybrid.Config{Node: "n", Syncer: redisSyncer(t, s), Interval: 50 * time.Millisecond, HotKeyRate: -1,
			Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: limit, Window: time.Minute}}}
	})[0]
	n, err := redisStore(t, s).MarkShards(context.Background(), victim, hybrid.DefaultHotKeyShards, time.Minute)
	require.NoError(t, err)
	require.Equal(t, hybrid.DefaultHotKeyShards, n)

	spent := 0
	for i := range 200 {
		for _, sep := range []string{"#", "%#", "%25#"} {
			d, err := l.AllowN(victim+sep+strconv.Itoa(i), limit)
			require.NoError(t, err)
			if d.Allowed() {
				spent++
			}
		}
	}
	require.Equal(t, 600, spent, "the attacker spends within its keys' limits")

	admitted := 0
	for range limit {
		if d, err := l.Allow(victim); err == nil && d.Allowed() {
			admitted++
		}
	}
	assert.Equal(t, limit, admitted, "the victim is admitted its whole limit")
	own, err := s.Client(t).Exists(context.Background(), redisPrefix+"{"+victim+"}:gcra").Result()
	require.NoError(t, err)
	assert.Zero(t, own, "the victim was decided on its shards, not on its own key")
}
