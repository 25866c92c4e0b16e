package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// clusterSyncer is a Redis Syncer on its own client of c.
func clusterSyncer(t *testing.T, c *redistest.Cluster) *global.Redis {
	t.Helper()
	fleet, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c.DeadlineClient(t), Timeout: time.Second})
	require.NoError(t, err)
	return fleet
}

// TestHotStrictKeyOnCluster drives one Strict key hot on a 3-master Redis
// Cluster and reads each master's INFO commandstats: once the key is
// sharded, its commands spread over all three, each within 20% of a
// third, instead of all landing on the master that owns the key.
func TestHotStrictKeyOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	l := fleettest.Limiters(t, 1, func(int) hybrid.Config {
		return hybrid.Config{Syncer: clusterSyncer(t, c), Interval: 50 * time.Millisecond, HotKeyRate: 100,
			Policies: []hybrid.Policy{{Name: "login", Mode: hybrid.Strict, Limit: 1_000_000, Window: time.Second}}}
	})[0]

	deadline := time.Now().Add(10 * time.Second)
	for len(l.HotKeys()) == 0 && time.Now().Before(deadline) {
		_, err := l.Allow("tenant-big")
		require.NoError(t, err)
	}
	hot := l.HotKeys()
	require.Len(t, hot, 1, "sharded")
	assert.Equal(t, hybrid.DefaultHotKeyShards, hot[0].Shards)

	for _, m := range c.Masters {
		m.ResetStats(t)
	}
	const n = 3000
	for range n {
		d, err := l.Allow("tenant-big")
		require.NoError(t, err)
		require.True(t, d.Allowed())
	}
	var per []int64
	total := int64(0)
	for _, m := range c.Masters {
		calls := m.Commands(t)["evalsha"]
		per = append(per, calls)
		total += calls
	}
	t.Logf("script calls per master for one hot key: %v (of %d decisions)", per, n)
	require.GreaterOrEqual(t, total, int64(n))
	for i, calls := range per {
		assert.InDelta(t, float64(total)/3, float64(calls), float64(total)/3*0.2, "master %d within 20%% of a third", i)
	}
}

// TestHotLeaseKeyOnCluster runs fifteen nodes syncing one Hybrid key on
// a 3-master Redis Cluster and reads each master's INFO commandstats.
// Unsplit, every lease script runs on the master that owns the key; split
// into three shards (HotKeyShards, fewer than a quarter of the nodes),
// each master runs part of them. The shard count is a quarter of the
// nodes the key's state shows: with twelve nodes, a loaded CI's late
// rounds let one go stale, and eleven made two shards.
func TestHotLeaseKeyOnCluster(t *testing.T) {
	t.Parallel()
	const limit = 12_000
	c := redistest.StartCluster(t, 3)
	p := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	run := func(key string, hot float64) (per []int64, shards []int) {
		nodes := fleettest.Limiters(t, 15, func(i int) hybrid.Config {
			return hybrid.Config{Node: fmt.Sprintf("%s-%d", key, i), Policies: []hybrid.Policy{p}, Syncer: clusterSyncer(t, c),
				Interval: 100 * time.Millisecond, HotLeaseSyncs: hot, HotKeyShards: 3}
		})
		rates := make([]float64, len(nodes))
		for i := range rates {
			rates[i] = limit / 2 / float64(len(nodes)) // half the limit: no node is short
		}
		fleettest.Drive(t, nodes, key, rates, 1500*time.Millisecond)
		for _, m := range c.Masters {
			m.ResetStats(t)
		}
		fleettest.Drive(t, nodes, key, rates, 2*time.Second)
		for _, m := range c.Masters {
			per = append(per, m.Commands(t)["evalsha"])
		}
		for _, l := range nodes {
			n := 0
			for _, h := range l.HotKeys() {
				n = h.Shards
			}
			shards = append(shards, n)
			require.NoError(t, l.Close())
		}
		return per, shards
	}
	plain, _ := run("plain", -1)
	split, shards := run("split", 50)
	t.Logf("lease scripts per master, 15 nodes for 2 s: unsplit %v, split %v", plain, split)
	for _, n := range shards {
		require.Equal(t, 3, n, "every node leases from 3 shards")
	}
	owner := 0
	for i, n := range plain {
		if n > plain[owner] {
			owner = i
		}
	}
	var total, totalPlain int64
	for i := range split {
		total += split[i]
		totalPlain += plain[i]
	}
	// Beside the lease scripts, every node registers with the census
	// (hl:nodes, on some master) every ten intervals: 15 nodes, about 30
	// calls in 2 s against some 300.
	assert.GreaterOrEqual(t, float64(plain[owner]), 0.88*float64(totalPlain), "unsplit, one master runs them all")
	for i, n := range split {
		assert.GreaterOrEqual(t, float64(n), 0.15*float64(total), "master %d runs part of the split key's scripts", i)
		assert.LessOrEqual(t, float64(n), 0.5*float64(total), "master %d runs at most half", i)
	}
}
