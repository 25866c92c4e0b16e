package global_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestQuietNodeIsNotSilent: a node that stops syncing one key is
// reserved for, as a node cut off that may spend its fallback share,
// only if Redis stopped hearing it altogether. A node that goes on
// syncing other keys reaches Redis, so it is not on its fallback
// ladder: it spends at most the lease it holds, which stays out of the
// bucket until it reports (a first version of the set forgot it there
// once two intervals had passed, as for any lease: heard, a node could
// spend it beside a full bucket). A node
// whose rounds are too long for its keys (8 nodes × 10,000 keys on
// this machine) syncs each key every few seconds; each key's other
// nodes then looked cut off, their reserves drained its bucket, no key
// could rest, and the fleet never caught up (BenchmarkFleetManyKeys).
func TestQuietNodeIsNotSilent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		alive  bool // a syncs another key meanwhile
		hijack bool // the set of nodes heard is a string: nobody is believed heard
	}{
		{"heard elsewhere", true, false},
		{"silent", false, false},
		{"heard, the set of another type", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartServer(t)
			r := newSyncer(t, s.DeadlineClient(t))
			if c.hijack {
				require.NoError(t, s.Client(t).Set(context.Background(), "hl:alive", "x", 0).Err())
			}
			lim := fleet.Limit{Limit: 1000, Window: time.Second}
			const interval = 10 * time.Millisecond
			steps := []partition.Step{{Until: 200 * time.Millisecond, Factor: 1}, {Factor: 0.5}}
			sync := func(node, key string, u fleet.Usage) fleet.Grant {
				u.Key, u.Limit = key, lim
				resp, err := r.Sync(context.Background(), &fleet.Request{Node: node, Interval: interval, Fallback: steps, Keys: []fleet.Usage{u}})
				require.NoError(t, err)
				require.NoError(t, resp.Grants[0].Err)
				return resp.Grants[0]
			}
			held := sync("a", "quiet", fleet.Usage{Demand: 500}).Lease // a is known on the key, demanding, and holds a lease
			require.Positive(t, held)
			b := sync("b", "quiet", fleet.Usage{Demand: 1000}).Lease
			// Heard, a stays past keep (about 1 s here), when a silent node
			// is forgotten, and the bucket refills; silent, it is reserved
			// for within keep.
			quiet := 250 * time.Millisecond
			if c.alive && !c.hijack {
				quiet = 1500 * time.Millisecond
			}
			for end := time.Now().Add(quiet); time.Now().Before(end); time.Sleep(interval) {
				if c.alive {
					sync("a", "other", fleet.Usage{Demand: 1})
				}
			}
			// b spent its lease; the bucket refilled meanwhile. a may
			// still spend what it holds: heard, its lease is out until it
			// reports. (Silent, it is reserved for on its ladder, but what
			// it still holds is not counted: see docs/partitions.md.)
			b2 := sync("b", "quiet", fleet.Usage{Consumed: b, Demand: 1000}).Lease // scans: a has not synced the key for 25 or 150 intervals
			if c.alive && !c.hijack {
				// The burst and b's lag, which a lease may take ahead of
				// the bucket (lagOf: a fifth of an interval's refill, 2).
				assert.LessOrEqual(t, held+b2, lim.Limit+2, "a holds %d, b leased %d: within the burst", held, b2)
			}
			reserved, err := s.Client(t).HGet(context.Background(), global.RedisKeyForTest("hl:", "quiet", "lease"), "p:a").Float64()
			if c.alive && !c.hijack {
				if err == nil {
					assert.Zero(t, reserved, "a node Redis still hears is not reserved for")
				}
				return
			}
			require.NoError(t, err, "a node Redis stopped hearing is reserved for")
			assert.Positive(t, reserved)
		})
	}
}

// TestFailedCallUnheard: a node one of whose calls failed (here Redis out
// of memory) is not scored as heard for unheardFor intervals, though its
// next calls go through: the failed call's keys follow the FailMode or
// the ladder meanwhile, and the other nodes must reserve for them.
func TestFailedCallUnheard(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	ctx := context.Background()
	r := newSyncer(t, s.DeadlineClient(t))
	const interval = 10 * time.Millisecond
	sync := func(key string) error {
		resp, err := r.Sync(ctx, &fleet.Request{Node: "a", Interval: interval,
			Keys: []fleet.Usage{{Key: key, Limit: fleet.Limit{Limit: 1000, Window: time.Second}, Demand: 10}}})
		if err != nil {
			return err
		}
		return resp.Grants[0].Err
	}
	scored := func() bool {
		_, err := c.ZScore(ctx, "hl:alive", "a").Result()
		return err == nil
	}
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	require.Error(t, sync("k1"), "out of memory")
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())
	require.NoError(t, sync("k2"))
	assert.False(t, scored(), "not scored right after a failed call")
	time.Sleep(25 * interval)
	require.NoError(t, sync("k2"))
	assert.True(t, scored(), "scored again %d intervals on", 25)
}

// TestHeardLeaseStaysOut: a node quiet on a key but heard on others
// keeps its lease out of the bucket in every state a scan may find it
// in: active but no longer live (between two intervals and the stale
// horizon), where it was left out; and, once cut off, it is not
// forgotten at once for having been quiet on the key past keep, but
// reserved for from when Redis last heard it.
func TestHeardLeaseStaysOut(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1000, Window: time.Second}
	steps := []partition.Step{{Until: 200 * time.Millisecond, Factor: 1}, {Factor: 0.5}}
	sync := func(node, key string, interval time.Duration, u fleet.Usage) fleet.Grant {
		u.Key, u.Limit = key, lim
		resp, err := r.Sync(ctx, &fleet.Request{Node: node, Interval: interval, Fallback: steps, Keys: []fleet.Usage{u}})
		require.NoError(t, err)
		require.NoError(t, resp.Grants[0].Err)
		return resp.Grants[0]
	}
	heard := func(node string, interval, d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(interval / 2) {
			sync(node, "elsewhere", interval, fleet.Usage{Demand: 1})
		}
	}

	t.Run("active, no longer live", func(t *testing.T) {
		const interval = 100 * time.Millisecond
		held := sync("a", "notlive", interval, fleet.Usage{Demand: 500}).Lease
		require.Positive(t, held)
		heard("a", interval, 250*time.Millisecond)                                                                    // past two intervals, within three
		require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", "notlive", "lease"), "tokens", lim.Limit).Err()) // refilled
		b := sync("b", "notlive", interval, fleet.Usage{Demand: 1000}).Lease
		assert.LessOrEqual(t, held+b, lim.Limit+20, "a holds %d, b leased %d (the limit and b's lag, 20: lagOf)", held, b)
	})
	t.Run("heard, then cut off", func(t *testing.T) {
		const interval = 10 * time.Millisecond
		require.Positive(t, sync("a", "cutoff", interval, fleet.Usage{Demand: 500}).Lease)
		sync("b", "cutoff", interval, fleet.Usage{Demand: 500})
		heard("a", interval, 1500*time.Millisecond) // quiet on the key past keep (about 1 s)
		time.Sleep(100 * time.Millisecond)          // then cut off: past the stale horizon
		sync("b", "cutoff", interval, fleet.Usage{Demand: 500})
		h := global.RedisKeyForTest("hl:", "cutoff", "lease")
		assert.NoError(t, c.HGet(ctx, h, "s:a").Err(), "not forgotten: heard 100 ms ago")
		reserved, err := c.HGet(ctx, h, "p:a").Float64()
		require.NoError(t, err, "reserved for")
		assert.Positive(t, reserved)
		assert.Less(t, reserved, 200.0, "from when last heard (100 ms at up to a token a ms), not from its last sync of the key")
	})
}

// TestAliveOutlivesARest: the fleet's set of nodes heard keeps a node
// for as long as a lease may rest (10,000 intervals) and a stale
// horizon, at least ten minutes: a node resting on a key past a quarter
// of its burst, cut off, is found so by its entry there, and pruned
// before its rest ended it would be counted active until its lease
// lapsed, and reserved for only from then.
func TestAliveOutlivesARest(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	c, ctx := s.Client(t), context.Background()
	sync := func() {
		resp, err := r.Sync(ctx, &fleet.Request{Node: "a", Interval: 100 * time.Millisecond,
			Keys: []fleet.Usage{{Key: "k", Limit: fleet.Limit{Limit: 1000, Window: time.Second}, Demand: 1}}})
		require.NoError(t, err)
		require.NoError(t, resp.Grants[0].Err)
	}
	sync()
	now, err := c.Time(ctx).Result()
	require.NoError(t, err)
	// Heard 700 s ago: past ten minutes, within a rest of 1,000 s.
	require.NoError(t, c.ZAdd(ctx, "hl:alive", redis.Z{Score: float64(now.Add(-700 * time.Second).UnixMicro()), Member: "resting"}).Err())
	require.NoError(t, c.PExpire(ctx, "hl:alive", time.Second).Err()) // due for pruning at the next call
	sync()
	_, err = c.ZScore(ctx, "hl:alive", "resting").Result()
	assert.NoError(t, err, "a node heard within a rest is kept")
	ttl, err := c.PTTL(ctx, "hl:alive").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 1000*time.Second, "the set outlives a rest")
}
