package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestHotStrictKeyOnCluster drives one Strict key hot on a 3-master Redis
// Cluster and reads each master's INFO commandstats: once the key is
// sharded, its commands spread over all three, each within 20% of a
// third, instead of all landing on the master that owns the key.
func TestHotStrictKeyOnCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	o := c.ClusterOptions()
	o.ContextTimeoutEnabled = true
	cc := redis.NewClusterClient(o)
	t.Cleanup(func() { cc.Close() })
	fleet, err := global.NewRedis(context.Background(), global.RedisConfig{Client: cc})
	require.NoError(t, err)
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: fleet, Interval: 50 * time.Millisecond, HotKeyRate: 100,
		Policies: []hybrid.Policy{{Name: "login", Mode: hybrid.Strict, Limit: 1_000_000, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })

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
