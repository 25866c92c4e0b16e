package global_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
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

// garbage is what no script writes into a number: not a number, not
// finite, beyond what a double holds exactly, or empty.
var garbage = []string{"nan", "inf", "-inf", "1e400", "1e300", "abc", ""}

// corruption is one value a hostile or broken store holds where a
// script keeps a number.
type corruption struct {
	name  string
	write func(ctx context.Context, c *redis.Client, key string) error // into key's Redis state
}

// corruptions returns a corruption per bad value of each field: the
// garbage, and for fields that cannot be negative or must be a whole
// shard count, those values too.
func corruptions(fields []string, negative bool, write func(field, v string) func(context.Context, *redis.Client, string) error) []corruption {
	var out []corruption
	for _, f := range fields {
		bad := garbage
		if !negative {
			bad = append(bad[:len(bad):len(bad)], "-1")
		}
		for _, v := range bad {
			out = append(out, corruption{fmt.Sprintf("%s=%q", f, v), write(f, v)})
		}
	}
	return out
}

// hset writes field = v into key's hash at suffix.
func hset(suffix string) func(field, v string) func(context.Context, *redis.Client, string) error {
	return func(field, v string) func(context.Context, *redis.Client, string) error {
		return func(ctx context.Context, c *redis.Client, key string) error {
			return c.HSet(ctx, global.RedisKeyForTest("hl:", key, suffix), field, v).Err()
		}
	}
}

// wantCorrupt checks that a call on corrupt state failed for that key
// alone, as corrupt (neither an outage nor a mistake in the call), and
// admitted nothing.
func wantCorrupt(t *testing.T, err error, admitted bool, what string) {
	t.Helper()
	assert.False(t, admitted, "%s: admitted", what)
	assert.ErrorIs(t, err, fleet.ErrCorrupt, what)
	if err != nil && testing.Verbose() {
		t.Logf("%s: %v", what, err)
	}
}

// TestCorruptStrictState writes what no script writes into a real
// Redis's strict state, marks and all: every call on it must fail for
// that key, and admit nothing. A shard mark of 0, a negative count or
// nan used to make the key admit everything.
func TestCorruptStrictState(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	set := func(suffix string) func(field, v string) func(context.Context, *redis.Client, string) error {
		return func(_, v string) func(context.Context, *redis.Client, string) error {
			return func(ctx context.Context, c *redis.Client, key string) error {
				return c.Set(ctx, global.RedisKeyForTest("hl:", key, suffix), v, time.Minute).Err()
			}
		}
	}
	marks := corruptions([]string{"shards"}, false, set("shards"))
	for _, v := range []string{"0", "1", "2.5", "1025"} {
		marks = append(marks, corruption{"shards=" + v, set("shards")("", v)})
	}
	marks = append(marks, corruption{"shards without a ttl", func(ctx context.Context, c *redis.Client, key string) error {
		return c.Set(ctx, global.RedisKeyForTest("hl:", key, "shards"), "4", 0).Err()
	}})
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim := fleet.Limit{Algorithm: alg, Limit: 100, Window: time.Minute}
		state := corruptions([]string{"tat"}, false, set("gcra"))
		for _, v := range []string{"1;x", "1;0", "1;-5", "x;1", "1;2;3", "1;nan", "-1;5"} { // "tat;emission"
			state = append(state, corruption{"gcra=" + v, set("gcra")("", v)})
		}
		if alg == local.SlidingWindow {
			state = corruptions([]string{"w", "cur", "prev"}, false, hset("sw"))
		}
		for i, bad := range append(marks, state...) {
			key := fmt.Sprintf("strict-%v-%d", alg, i)
			what := fmt.Sprintf("%v %s", alg, bad.name)
			require.NoError(t, bad.write(ctx, c, key))
			d, err := r.Allow(ctx, key, lim, 1)
			wantCorrupt(t, err, d.Allowed || (err == nil && d.Shards == 0), what+": Allow")
			err = r.ChargeAtLeast(ctx, key, lim, 10)
			if i >= len(marks) { // a charge reads the state, not the mark
				wantCorrupt(t, err, false, what+": ChargeAtLeast")
			}
			if i < len(marks) {
				_, err = r.MarkShards(ctx, key, 4, time.Minute)
				wantCorrupt(t, err, false, what+": MarkShards")
			}
		}
	}
}

// TestCorruptLeaseState writes what no script writes into a real
// Redis's lease state and lease marks: Sync must fail that key's grant
// alone, lease nothing, and every call reading the state must fail.
func TestCorruptLeaseState(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	now := strconv.FormatInt(redisNow(t, c).UnixMicro(), 10)
	// other is a node seen just now, so that its fields are read.
	other := func(field, v string) func(context.Context, *redis.Client, string) error {
		return func(ctx context.Context, c *redis.Client, key string) error {
			vals := map[string]string{"s:other": now, "d:other": "5", "l:other": "5", "g:other": now}
			vals[field] = v
			return c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"), vals).Err()
		}
	}
	// This node's lease and the key's expiry (x) are read by Sync alone;
	// the others' times and demands by Sync and by a charge, which
	// forgets stale nodes.
	node := corruptions([]string{"l:n", "g:n", "k:n", "c:n", "x"}, false, hset("lease"))
	others := corruptions([]string{"s:other", "d:other"}, false, other)
	mark := corruptions([]string{"n", "until"}, false, func(field, v string) func(context.Context, *redis.Client, string) error {
		return func(ctx context.Context, c *redis.Client, key string) error {
			vals := map[string]any{"n": 4, "until": now}
			vals[field] = v
			return c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lshards"), vals).Err()
		}
	})
	for _, v := range []string{"0", "1", "2.5", "1025"} {
		mark = append(mark, corruption{"n=" + v, func(ctx context.Context, c *redis.Client, key string) error {
			return c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lshards"), "n", v, "until", now).Err()
		}})
	}
	for _, f := range []string{"n", "until"} {
		mark = append(mark, corruption{"only " + f, hset("lshards")(f, now)})
	}
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim := fleet.Limit{Algorithm: alg, Limit: 100, Window: time.Minute}
		state := corruptions([]string{"tokens"}, true, hset("lease"))
		state = append(state, corruptions([]string{"ts", "b"}, false, hset("lease"))...)
		state = append(state, corruption{"b=0", hset("lease")("b", "0")}, corruption{"b=2.5", hset("lease")("b", "2.5")})
		if alg == local.SlidingWindow {
			state = corruptions([]string{"w", "cur", "prev"}, false, hset("lease"))
		}
		state = append(state, corruption{"a string", func(ctx context.Context, c *redis.Client, key string) error {
			return c.Set(ctx, global.RedisKeyForTest("hl:", key, "lease"), "x", time.Minute).Err()
		}})
		node := node
		if alg == local.TokenBucket { // how long a lease stands (a key resting on a node): a token bucket's
			node = slices.Concat(node, corruptions([]string{"t:n"}, false, hset("lease")), corruptions([]string{"t:other"}, false, other))
		}
		for i, bad := range slices.Concat(state, others, node, mark) {
			key := fmt.Sprintf("lease-%v-%d", alg, i)
			what := fmt.Sprintf("%v %s", alg, bad.name)
			if i < len(state) { // a node known to the key
				sync1(t, r, "n", key, lim, 0, 10)
			}
			require.NoError(t, bad.write(ctx, c, key))
			resp, err := r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second,
				Keys: []fleet.Usage{{Key: "fine", Limit: lim, Demand: 10}, {Key: key, Limit: lim, Consumed: 10, Demand: 10}}})
			require.NoError(t, err, what)
			require.NoError(t, resp.Grants[0].Err, "%s: another key is served", what)
			g := resp.Grants[1]
			wantCorrupt(t, g.Err, g.Lease > 0 || (g.Err == nil && g.Shards == 0), what+": Sync")

			if i < len(state) {
				_, err = r.LeaseUsed(ctx, key, itself, lim)
				wantCorrupt(t, err, false, what+": LeaseUsed")
			}
			if i < len(state)+len(others) {
				wantCorrupt(t, r.ChargeLeasesAtLeast(ctx, key, itself, lim, 10, time.Second), false, what+": ChargeLeasesAtLeast")
			}
			if i < len(state)+len(others)+len(node) {
				continue
			}
			_, _, err = r.LeaseShardMark(ctx, key)
			wantCorrupt(t, err, false, what+": LeaseShardMark")
			_, _, err = r.MarkLeaseShards(ctx, key, 4, time.Minute, lim)
			wantCorrupt(t, err, false, what+": MarkLeaseShards")
			_, err = r.EndLeaseShards(ctx, key)
			wantCorrupt(t, err, false, what+": EndLeaseShards")
		}
	}

	// Debts no fleet runs up, each within what a state may hold, that
	// would overflow their sum.
	lim := fleet.Limit{Limit: 100, Window: time.Minute}
	shards := fleet.ShardsOf("debt", 3)
	for _, sh := range shards {
		k := global.RedisShardKeyForTest("hl:", "debt", sh, "lease")
		require.NoError(t, c.HSet(ctx, k, "tokens", "-4000000000000000000").Err())
	}
	_, err := r.LeaseUsed(ctx, "debt", shards, lim)
	wantCorrupt(t, err, false, "LeaseUsed overflowing")
}

// TestCorruptSeriesFields: a node's series fields hold what no script
// writes (Total and Series are at most MaxLimit, and whole): the key must
// fail as corrupt. A c:<node> of 2^60 used to make every report of the
// series count nothing.
func TestCorruptSeriesFields(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim := fleet.Limit{Algorithm: alg, Limit: 100, Window: time.Minute}
		for i, bad := range []map[string]string{
			{"k:n": "5", "c:n": "1152921504606846976"},
			{"k:n": "5", "c:n": "9007199254740994"},
			{"k:n": "5", "c:n": "2.5"},
			{"k:n": "1152921504606846976", "c:n": "0"},
			{"k:n": "2.5", "c:n": "0"},
			{"k:n": "0", "c:n": "0"},
		} {
			key := fmt.Sprintf("series-corrupt-%v-%d", alg, i)
			require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"), bad).Err())
			resp, err := r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second,
				Keys: []fleet.Usage{{Key: key, Limit: lim, Consumed: 50, Demand: 10, Series: 5, Total: 50}}})
			require.NoError(t, err)
			g := resp.Grants[0]
			wantCorrupt(t, g.Err, g.Lease > 0, fmt.Sprintf("%v %v", alg, bad))
		}
	}
}

// TestCorruptReserve: a reserve (p:<node>) holding what no script
// writes, the node's own or a silent node's, or what a sliding window
// reckoned of a silent node's (q:<node>), fails the key as corrupt, by
// either algorithm.
func TestCorruptReserve(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	now := redisNow(t, c).UnixMicro()
	for _, lim := range []fleet.Limit{{Limit: 100, Window: time.Minute}, {Algorithm: local.SlidingWindow, Limit: 100, Window: time.Minute}} {
		for i, v := range append(garbage[:len(garbage):len(garbage)], "-1") {
			for j, f := range []string{"p:n", "p:other", "q:other"} {
				key := fmt.Sprintf("reserve-corrupt-%v-%d-%d", lim.Algorithm, i, j)
				silent := fmt.Sprint(now - int64(time.Minute/time.Microsecond)) // stale, within keep
				require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"),
					"s:other", silent, "d:other", "5", f, v).Err())
				resp, err := r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second, Fallback: []partition.Step{{Until: time.Hour, Factor: 1}},
					Keys: []fleet.Usage{{Key: key, Limit: lim, Consumed: 10, Demand: 10}}})
				require.NoError(t, err)
				g := resp.Grants[0]
				wantCorrupt(t, g.Err, g.Lease > 0, fmt.Sprintf("%v %s=%q", lim.Algorithm, f, v))
			}
		}
	}
	// The window of a sliding window's first charge (pw:<node>), read
	// when the node is back to settle its reserve.
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 100, Window: time.Minute}
	for i, v := range garbage {
		key := fmt.Sprintf("reserve-window-corrupt-%d", i)
		require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"), "p:n", "5", "pw:n", v).Err())
		resp, err := r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second, Keys: []fleet.Usage{{Key: key, Limit: lim, Consumed: 1, Demand: 10}}})
		require.NoError(t, err)
		g := resp.Grants[0]
		wantCorrupt(t, g.Err, g.Lease > 0, fmt.Sprintf("pw:n=%q", v))
	}
}

// TestStrictStateOfAnotherType: a strict key's state or shard mark of
// another type than the scripts write (a hash) reads as none, as a
// deleted one would (strictRead): the key decides as a full bucket, on
// itself, and the decision's SET puts a state of the right type back.
// It grants no more than a DEL of the key; a number no script writes is
// still refused (TestCorruptStrictState).
func TestStrictStateOfAnotherType(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Algorithm: local.TokenBucket, Limit: 2, Window: time.Minute}
	for _, suffix := range []string{"gcra", "shards"} {
		key := "typed-" + suffix
		require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", key, suffix), "x", "1").Err())
		admitted := 0
		for range 4 {
			d, err := r.Allow(ctx, key, lim, 1)
			require.NoError(t, err, suffix)
			require.Zero(t, d.Shards, suffix)
			if d.Allowed {
				admitted++
			}
		}
		assert.Equal(t, 2, admitted, "%s: a full bucket of 2, then exact", suffix)
	}
	typ, err := c.Type(ctx, global.RedisKeyForTest("hl:", "typed-gcra", "gcra")).Result()
	require.NoError(t, err)
	assert.Equal(t, "string", typ, "the state is the scripts' again")
}
