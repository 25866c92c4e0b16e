package global_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// The tests of resting nodes cut off sync every 10 ms, on a limit of
// 1,000 per 10 s and a ladder whose first step lasts a minute.
const (
	restLimit    = 1000
	restInterval = 10 * time.Millisecond
)

// restingKey starts a Redis and returns it with a sync of one key, of
// the limit above, for a node that asks to rest on it for hold.
func restingKey(t *testing.T, hold time.Duration) (*redistest.Server, func(node, key string, u fleet.Usage) fleet.Grant) {
	t.Helper()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	steps := []partition.Step{{Until: time.Minute, Factor: 1}, {Factor: 0.5}}
	return s, func(node, key string, u fleet.Usage) fleet.Grant {
		u.Key, u.Limit, u.Hold = key, fleet.Limit{Limit: restLimit, Window: 10 * time.Second}, hold
		resp, err := r.Sync(context.Background(), &fleet.Request{Node: node, Interval: restInterval, Fallback: steps, Keys: []fleet.Usage{u}})
		require.NoError(t, err)
		require.NoError(t, resp.Grants[0].Err)
		return resp.Grants[0]
	}
}

// TestRestingNodeCutOff: a node resting on a key (its lease granted for
// its Hold, two minutes or more) that Redis stops hearing altogether is
// cut off, spending its lease and then its fail-static share on its
// ladder. Once the key is more than a quarter spent, Redis counts it
// out: its lease stays out of the bucket, and its share is reserved from
// when Redis last heard it, not from its lease's lapse, so that the
// nodes Redis hears do not take the whole limit meanwhile. Before, a
// resting node counted as active, its lease out and nothing reserved,
// until the lease lapsed. A resting node heard on other keys is not cut
// off: it spends at most its lease.
func TestRestingNodeCutOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		heard bool // a syncs another key meanwhile
	}{
		{"cut off", false},
		{"heard elsewhere", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, sync := restingKey(t, 10*time.Second) // 1,000 Intervals (of 10,000 allowed)
			a := sync("a", "k", fleet.Usage{Demand: 10, Series: 1})
			require.Greater(t, a.TTL, time.Second, "a rests on the key")
			b := sync("b", "k", fleet.Usage{Demand: 10, Series: 2})
			require.Greater(t, b.TTL, time.Second, "b rests on the key")
			for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(restInterval) {
				if c.heard {
					sync("a", "other", fleet.Usage{Demand: 1})
				}
			}
			// b spends 800 of the burst of 1,000: the key is hot from
			// its next lease on.
			g := sync("b", "k", fleet.Usage{Consumed: 800, Demand: 100, Series: 2, Total: 800})
			for range 3 {
				time.Sleep(restInterval)
				if c.heard {
					sync("a", "other", fleet.Usage{Demand: 1})
				}
				g = sync("b", "k", fleet.Usage{Demand: 100, Series: 2, Total: 800})
			}
			reserved, err := s.Client(t).HGet(context.Background(), global.RedisKeyForTest("hl:", "k", "lease"), "p:a").Float64()
			t.Logf("b's lease %d, nodes %d, used %d; a's reserve %v (%v)", g.Lease, g.Nodes, g.Used, reserved, err)
			if c.heard {
				assert.Equal(t, 2, g.Nodes, "a, heard, still rests on the key")
				assert.Zero(t, reserved, "nothing reserved for a node Redis hears")
			} else {
				assert.Equal(t, 1, g.Nodes, "a, cut off, is no longer active")
				assert.Positive(t, reserved, "a's fail-static share reserved from when Redis last heard it")
			}
			// Used counts the bucket's tokens out, b's new lease and a's
			// resting one among them (b's earlier leases too, spent for
			// all Redis knows if a loaded machine let them lapse): never
			// past the burst.
			assert.LessOrEqual(t, g.Used, int64(restLimit), "a's resting lease stays out, and the bucket lends no more than its burst")
		})
	}
}

// TestRestingNodeCutOffLapses: the reserve for a node cut off while it
// rested goes on growing from when Redis last heard it once its lease
// has lapsed too (a first version then counted from the lapse, which
// froze the reserve below what was charged already).
func TestRestingNodeCutOffLapses(t *testing.T) {
	t.Parallel()
	s, syncKey := restingKey(t, 300*time.Millisecond)
	sync := func(node string, u fleet.Usage) fleet.Grant { return syncKey(node, "k", u) }
	reserved := func() float64 {
		v, err := s.Client(t).HGet(context.Background(), global.RedisKeyForTest("hl:", "k", "lease"), "p:a").Float64()
		require.NoError(t, err)
		return v
	}
	heard := time.Now()
	require.Greater(t, sync("a", fleet.Usage{Demand: 10, Series: 1}).TTL, 2*restInterval, "a rests")
	sync("b", fleet.Usage{Demand: 10, Series: 2})
	time.Sleep(50 * time.Millisecond) // a is cut off: not heard since
	sync("b", fleet.Usage{Consumed: 800, Demand: 100, Series: 2, Total: 800})
	var before float64
	var at time.Time
	for range 3 {
		time.Sleep(restInterval)
		at = time.Now()
		sync("b", fleet.Usage{Demand: 100, Series: 2, Total: 800})
		before = reserved()
	}
	time.Sleep(400 * time.Millisecond) // past a's lapse
	end := time.Now()
	sync("b", fleet.Usage{Demand: 100, Series: 2, Total: 800})
	after := reserved()
	// The reserve is a's share of the rate since it was last heard (the
	// ladder's first step lasts a minute): it grows as the time does.
	grown := float64(end.Sub(heard)) / float64(at.Sub(heard))
	t.Logf("a's reserve while resting %.2f, after its lapse %.2f: %.1f times, for %.1f times the time", before, after, after/before, grown)
	assert.GreaterOrEqual(t, after, before*grown*0.8, "the reserve grows from when Redis last heard a")
}

// TestShortHoldKeepsARestingLease: a node whose lease rests on a key
// keeps the key's state in Redis as long as its lease stands, whatever
// the others ask: a node new to the key (its Hold short) renewed the
// key's expiry to its own, shorter, and the state (the bucket, the
// resting lease counted out) expired under the resting node, whose
// lease the fleet then leased again beside it.
func TestShortHoldKeepsARestingLease(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		aIv, bIv     time.Duration // each node's Interval
		aHold, bHold time.Duration
	}{
		{"short hold", restInterval, restInterval, 30 * time.Second, 0},
		// a rests for 1,000 s, past any rest of b's (10,000 of its 10 ms).
		{"short interval", 100 * time.Millisecond, restInterval, 1000 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartServer(t)
			r := newSyncer(t, s.DeadlineClient(t))
			lim := fleet.Limit{Limit: 100, Window: time.Second}
			sync := func(node string, iv, hold time.Duration) fleet.Grant {
				resp, err := r.Sync(context.Background(), &fleet.Request{Node: node, Interval: iv,
					Keys: []fleet.Usage{{Key: "k", Limit: lim, Demand: 2, Series: 1, Hold: hold}}})
				require.NoError(t, err)
				require.NoError(t, resp.Grants[0].Err)
				return resp.Grants[0]
			}
			require.Greater(t, sync("a", c.aIv, c.aHold).TTL, 10*time.Second, "a rests on the key")
			sync("b", c.bIv, c.bHold) // its state's TTL: about 2 s (two windows and ten intervals), kept for twice that
			time.Sleep(5 * time.Second)
			keys, err := s.Client(t).Keys(context.Background(), "*").Result()
			require.NoError(t, err)
			assert.Condition(t, func() bool {
				for _, k := range keys {
					if strings.HasSuffix(k, "lease") {
						return true
					}
				}
				return false
			}, "the key's state outlives b's TTL while a's lease rests: %v", keys)
		})
	}
}
