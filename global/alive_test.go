package global_test

import (
	"context"
	"testing"
	"time"

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
// ladder: it spends at most the lease it was charged for. A node
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
			sync("b", "quiet", fleet.Usage{Demand: 1000})
			sync("a", "quiet", fleet.Usage{Demand: 500}) // a is known on the key, demanding
			for end := time.Now().Add(250 * time.Millisecond); time.Now().Before(end); time.Sleep(interval) {
				if c.alive {
					sync("a", "other", fleet.Usage{Demand: 1})
				}
			}
			sync("b", "quiet", fleet.Usage{Demand: 1000}) // scans: a has not synced the key for 25 intervals
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
