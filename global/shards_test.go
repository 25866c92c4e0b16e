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

// itself is the key itself, as the shard the lease calls take.
var itself = []fleet.Shard{{}}

func TestShardsOf(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"tenant-1", "weird{key}%", ""} {
		for _, n := range []int{1, 3, 12} {
			shards := fleet.ShardsOf(key, n)
			assert.Len(t, shards, n)
			seen := map[string]bool{}
			for i, sh := range shards {
				assert.NotZero(t, sh)
				// The slot Redis computes for the shard as global names it.
				k := global.RedisShardKeyForTest("hl:", key, sh, "gcra")
				assert.False(t, seen[k], "distinct")
				seen[k] = true
				slot := redisslot.Of(k)
				assert.GreaterOrEqual(t, slot, i*redisslot.Slots/n, "%q shard %d", key, i)
				assert.Less(t, slot, (i+1)*redisslot.Slots/n, "%q shard %d", key, i)
			}
		}
	}
}

// TestShardNames checks that no user key's Redis names are a shard's:
// keys spelt as shards are, raw or escaped, and keys whose bytes are
// the escape character, land elsewhere, and so do the shards of other
// keys.
func TestShardNames(t *testing.T) {
	t.Parallel()
	shards := map[string]string{} // Redis name -> whose shard
	for _, key := range []string{"a", "a#0", "a%", "a%#0", "a%25#0", "a%23", "{a}", "a}%#0{"} {
		for _, sh := range fleet.ShardsOf(key, 16) {
			name := global.RedisShardKeyForTest("hl:", key, sh, "lease")
			assert.NotContains(t, shards, name, "%q and %q share a shard", key, shards[name])
			shards[name] = key + sh.String()
		}
	}
	for _, key := range []string{"a%#0", "a%#1", "a#0", "a%25#0", "a%%#0", "a%23", "a%2#0", "a%#", "%#0"} {
		for _, k := range []string{key, "a" + key} {
			name := global.RedisKeyForTest("hl:", k, "lease")
			assert.NotContains(t, shards, name, "user key %q names shard %s", k, shards[name])
		}
	}
	assert.Equal(t, "", fleet.Shard{}.String())
}

// FuzzShardNames: no user key, whatever its bytes, is named in Redis as
// a shard of any key, and distinct keys' shards are distinct.
func FuzzShardNames(f *testing.F) {
	for _, seed := range [][2]string{{"a#0", "a"}, {"a%#0", "a"}, {"a%25#0", "a"}, {"%#1", ""}, {"a}%#0{", "a}"}, {"b", "a%#0"}} {
		f.Add(seed[0], seed[1], uint8(4))
	}
	f.Fuzz(func(t *testing.T, user, key string, n uint8) {
		name := global.RedisKeyForTest("hl:", user, "lease")
		for _, sh := range fleet.ShardsOf(key, int(n%16)+1) {
			if s := global.RedisShardKeyForTest("hl:", key, sh, "lease"); s == name {
				t.Fatalf("user key %q is named %s, as shard %s of %q", user, name, sh, key)
			}
			if user != key {
				for _, other := range fleet.ShardsOf(user, int(n%16)+1) {
					if global.RedisShardKeyForTest("hl:", user, other, "lease") == global.RedisShardKeyForTest("hl:", key, sh, "lease") {
						t.Fatalf("%q and %q share a shard", user, key)
					}
				}
			}
		}
	})
}

// TestMarkShards checks the fleet-wide shard marker: while it stands,
// Allow on the key decides nothing and names the shard count; a second
// mark keeps the first count; once it expires, Allow decides again.
func TestMarkShards(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		key := "marked-" + alg.String()
		lim := fleet.Limit{Algorithm: alg, Limit: 100, Window: time.Minute}
		d, err := r.Allow(ctx, key, lim, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.Zero(t, d.Shards)

		n, err := r.MarkShards(ctx, key, 12, 300*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, 12, n)
		n, err = r.MarkShards(ctx, key, 6, 300*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, 12, n, "the count in force stays")

		d, err = r.Allow(ctx, key, lim, 1)
		require.NoError(t, err)
		assert.Equal(t, 12, d.Shards, alg)
		assert.False(t, d.Allowed)
		assert.InDelta(t, 300*time.Millisecond, d.ShardedFor, float64(100*time.Millisecond))

		require.Eventually(t, func() bool {
			d, err = r.Allow(ctx, key, lim, 1)
			return err == nil && d.Shards == 0
		}, 2*time.Second, 20*time.Millisecond, "the mark expires")
		assert.True(t, d.Allowed)
		assert.Equal(t, int64(98), d.Remaining, "what was decided while marked was not counted")
	}
	_, err := r.MarkShards(ctx, "k", 1, time.Second)
	require.ErrorIs(t, err, fleet.ErrInvalid)
}

// TestChargeAtLeast checks that charging a key raises what it shows spent
// to the amount, once, however many nodes charge it.
func TestChargeAtLeast(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim := fleet.Limit{Algorithm: alg, Limit: 100, Window: time.Hour}
		for _, tc := range []struct {
			name    string
			before  int64 // admitted before the charges
			charges []int64
			left    int64 // what Allow then finds left, before its own 1
		}{
			{"once", 0, []int64{40}, 60},
			{"by four nodes", 0, []int64{40, 40, 40, 40}, 60},
			{"the largest counts", 0, []int64{10, 40, 25}, 60},
			{"already spent more", 70, []int64{40}, 30},
			{"spent less", 20, []int64{40}, 60},
			{"more than the limit", 0, []int64{500}, 0},
			{"nothing", 0, []int64{0}, 100},
		} {
			key := fmt.Sprintf("charge-%v-%s", alg, tc.name)
			if tc.before > 0 {
				d, err := r.Allow(ctx, key, lim, tc.before)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			for _, c := range tc.charges {
				require.NoError(t, r.ChargeAtLeast(ctx, key, lim, c))
			}
			d, err := r.Allow(ctx, key, lim, 1)
			require.NoError(t, err)
			if tc.left == 0 {
				assert.False(t, d.Allowed, "%v %s", alg, tc.name)
				continue
			}
			assert.True(t, d.Allowed, "%v %s", alg, tc.name)
			assert.Equal(t, tc.left-1, d.Remaining, "%v %s", alg, tc.name)
		}
	}
}

// sync1 syncs one key for node and returns its grant.
func sync1(t *testing.T, r *global.Redis, node, key string, lim fleet.Limit, consumed, demand int64) fleet.Grant {
	t.Helper()
	return syncShard(t, r, node, key, fleet.Shard{}, lim, consumed, demand)
}

// syncShard syncs one shard of key for node and returns its grant.
func syncShard(t *testing.T, r *global.Redis, node, key string, shard fleet.Shard, lim fleet.Limit, consumed, demand int64) fleet.Grant {
	t.Helper()
	resp, err := r.Sync(context.Background(), &fleet.Request{Node: node, Interval: time.Second,
		Keys: []fleet.Usage{{Key: key, Shard: shard, Limit: lim, Consumed: consumed, Demand: demand}}})
	require.NoError(t, err)
	require.NoError(t, resp.Grants[0].Err)
	return resp.Grants[0]
}

// TestLeaseShardMark checks the lease mark: while it stands, Sync on the
// key grants nothing, applies none of the reported consumption and names
// the shard count; it is extended, never shortened, and never set again
// by an extension once it has ended; after its end Sync still sends
// nodes to the shards, with no time left, until EndLeaseShards; then the
// key's lease state is as the mark found it.
func TestLeaseShardMark(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		key := "lease-marked-" + alg.String()
		lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: time.Hour}
		g := sync1(t, r, "a", key, lim, 0, 100)
		require.Equal(t, int64(100), g.Lease)
		require.Zero(t, g.Shards)

		n, left, err := r.LeaseShardMark(ctx, key)
		require.NoError(t, err)
		assert.Zero(t, n)
		assert.Zero(t, left)
		n, _, err = r.MarkLeaseShards(ctx, key, 0, ttl, lim)
		require.NoError(t, err)
		assert.Zero(t, n, "an extension sets no mark")

		n, left, err = r.MarkLeaseShards(ctx, key, 4, ttl, lim)
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		assert.Equal(t, ttl, left)
		n, left, err = r.MarkLeaseShards(ctx, key, 6, ttl/2, lim)
		require.NoError(t, err)
		assert.Equal(t, 4, n, "the count in force stays")
		assert.Greater(t, left, ttl/2, "never shortened")
		n, left, err = r.LeaseShardMark(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		assert.InDelta(t, ttl, left, float64(100*time.Millisecond))

		g = sync1(t, r, "a", key, lim, 500, 100)
		assert.Equal(t, fleet.Grant{Shards: 4, ShardedFor: g.ShardedFor}, g, alg)
		assert.InDelta(t, ttl, g.ShardedFor, float64(100*time.Millisecond))
		ended, err := r.EndLeaseShards(ctx, key)
		require.NoError(t, err)
		assert.False(t, ended, "a standing mark is not ended")

		require.Eventually(t, func() bool {
			_, left, err := r.LeaseShardMark(ctx, key)
			return err == nil && left == 0
		}, 2*time.Second, 20*time.Millisecond, "the mark runs out")
		g = sync1(t, r, "a", key, lim, 500, 100)
		assert.Equal(t, fleet.Grant{Shards: 4}, g, "%v: still sent to the shards, with no time left, until the merge", alg)
		n, left, err = r.MarkLeaseShards(ctx, key, 0, ttl, lim)
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		assert.Zero(t, left, "an ended mark is not extended")
		n, left, err = r.MarkLeaseShards(ctx, key, 2, ttl, lim)
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		assert.Zero(t, left, "nor set again before its merge")

		ended, err = r.EndLeaseShards(ctx, key)
		require.NoError(t, err)
		assert.True(t, ended)
		n, _, err = r.LeaseShardMark(ctx, key)
		require.NoError(t, err)
		assert.Zero(t, n)
		// The 500s reported while marked went to the shards, not here:
		// a's lease of 100 is still outstanding, and settles as spent.
		g = sync1(t, r, "a", key, lim, 100, 0)
		assert.Zero(t, g.Shards)
		assert.Equal(t, int64(100), g.Used, alg)
	}
	_, _, err := r.MarkLeaseShards(ctx, "k", 1, time.Second, fleet.Limit{Limit: 1, Window: time.Second})
	require.ErrorIs(t, err, fleet.ErrInvalid)
	_, _, err = r.MarkLeaseShards(ctx, "k", 2, time.Second, fleet.Limit{})
	require.ErrorIs(t, err, fleet.ErrInvalid)
}

// TestLeaseUsedAndCharge checks that LeaseUsed sums what lease states
// show spent, and that ChargeLeasesAtLeast raises it to at least an
// amount, once, however many nodes charge, and leaves leases alone.
func TestLeaseUsedAndCharge(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: time.Hour}
		for _, tc := range []struct {
			name    string
			leased  int64 // by node a, before the charges
			charges []int64
			used    int64 // what LeaseUsed then shows
		}{
			{"once", 0, []int64{400}, 400},
			{"by four nodes", 0, []int64{400, 400, 400, 400}, 400},
			{"the largest counts", 0, []int64{100, 400, 250}, 400},
			{"already spent more", 700, []int64{400}, 700},
			{"spent less", 200, []int64{400}, 400},
			{"more than the limit", 0, []int64{5000}, 1000},
			{"nothing", 0, []int64{0}, 0},
			{"untouched", 300, nil, 300},
		} {
			key := fmt.Sprintf("lcharge-%v-%s", alg, tc.name)
			if tc.leased > 0 {
				require.Equal(t, tc.leased, sync1(t, r, "a", key, lim, 0, tc.leased).Lease)
			}
			for _, c := range tc.charges {
				require.NoError(t, r.ChargeLeasesAtLeast(ctx, key, itself, lim, c, 0))
			}
			used, err := r.LeaseUsed(ctx, key, itself, lim)
			require.NoError(t, err)
			assert.Equal(t, tc.used, used, "%v %s", alg, tc.name)
			// a hands its lease back: what was charged stays.
			g := sync1(t, r, "a", key, lim, 0, 0)
			assert.Equal(t, max(tc.used-tc.leased, 0), g.Used, "%v %s: the lease came back, the charge stays", alg, tc.name)
		}
		// Summed over keys, as over a key's shards.
		key := "lsum-" + alg.String()
		shards := fleet.ShardsOf(key, 3)
		for i, sh := range shards {
			syncShard(t, r, "a", key, sh, lim, 0, int64(10*(i+1)))
		}
		used, err := r.LeaseUsed(ctx, key, shards, lim)
		require.NoError(t, err)
		assert.Equal(t, int64(60), used, alg)
	}
	require.ErrorIs(t, r.ChargeLeasesAtLeast(ctx, "k", itself, fleet.Limit{}, 5, 0), fleet.ErrInvalid)
	lim := fleet.Limit{Limit: 1000, Window: time.Hour}
	require.ErrorIs(t, r.ChargeLeasesAtLeast(ctx, "k", itself, lim, 5, -time.Second), fleet.ErrInvalid)
	_, err := r.LeaseUsed(ctx, "k", itself, fleet.Limit{})
	require.ErrorIs(t, err, fleet.ErrInvalid)
}

// TestChargeForgetsStaleNodes checks that a charge with an interval
// forgets the nodes not seen for three of them, leases and all: a node
// coming back reports against no lease, so what it reports is all
// counted and nothing is handed back, while a node seen lately keeps its
// lease.
func TestChargeForgetsStaleNodes(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		key := "forget-" + alg.String()
		lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: time.Hour}
		require.Equal(t, int64(100), sync1(t, r, "old", key, lim, 0, 100).Lease)
		time.Sleep(400 * time.Millisecond)
		require.Equal(t, int64(100), sync1(t, r, "new", key, lim, 0, 100).Lease)
		require.NoError(t, r.ChargeLeasesAtLeast(ctx, key, itself, lim, 0, 50*time.Millisecond))
		// old's lease of 100 is forgotten, still counted as spent: its
		// report of 30 is 30 more, not 70 handed back.
		g := sync1(t, r, "old", key, lim, 30, 0)
		assert.Equal(t, int64(230), g.Used, alg)
		// new's lease stands: its report of 30 hands 70 back.
		g = sync1(t, r, "new", key, lim, 30, 0)
		assert.Equal(t, int64(160), g.Used, alg)
	}
}

// TestShardStateUnreachable spends, on a real Redis, every user key
// spelt as a shard of tenant:victim once was (the key, '#', a number) or
// might be ('%#', or '%' spelt %25), both as strict keys and as leases,
// each within its own limit: the victim's shards, strict and lease,
// must be untouched.
func TestShardStateUnreachable(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	const victim, n = "tenant:victim", 12
	per := fleet.Limit{Limit: 10, Window: time.Minute}
	for i := range 200 {
		for _, sep := range []string{"#", "%#", "%25#"} {
			key := victim + sep + fmt.Sprint(i)
			d, err := r.Allow(ctx, key, per, per.Limit)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, per.Limit, sync1(t, r, "attacker", key, per, 0, per.Limit).Lease)
		}
	}
	strictLeft, leased := int64(0), int64(0)
	for _, shard := range fleet.ShardsOf(victim, n) {
		d, err := r.AllowShard(ctx, victim, shard, per, 0)
		require.NoError(t, err)
		strictLeft += d.Remaining
		leased += syncShard(t, r, "victim", victim, shard, per, 0, per.Limit).Lease
	}
	assert.Equal(t, n*per.Limit, strictLeft, "the strict shards are whole")
	assert.Equal(t, n*per.Limit, leased, "the lease shards are whole")
}
