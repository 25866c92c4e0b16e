package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/redisslot"
)

// keySlotTests are keys whose slots Redis documents or that exercise the
// hash tag rules: only the first "{" counts, and an empty tag is no tag.
var keySlotTests = []struct {
	key    string
	sameAs string // a key that must share the slot, if any
	slot   int    // the expected slot, or -1 if only sameAs is checked
}{
	{key: "123456789", slot: 0x31C3 % redisslot.Slots}, // the CRC16/XMODEM check value
	{key: "foo", slot: 12182},
	{key: "bar", slot: 5061},
	{key: "", slot: 0},
	{key: "{user1000}.following", sameAs: "{user1000}.followers", slot: -1},
	{key: "{user1000}.following", sameAs: "user1000", slot: -1},
	{key: "foo{}{bar}", sameAs: "foo{}{bar}", slot: -1},
	{key: "foo{{bar}}zap", sameAs: "{bar", slot: -1},
	{key: "foo{bar}{zap}", sameAs: "bar", slot: -1},
	{key: "{}", slot: -1},
	{key: "a{b", slot: -1},
	{key: "hybridlimit:{tenant-7}:bucket", sameAs: "tenant-7", slot: -1},
}

func TestKeySlot(t *testing.T) {
	t.Parallel()
	for _, tt := range keySlotTests {
		got := redisslot.Of(tt.key)
		assert.True(t, got >= 0 && got < redisslot.Slots, "redisslot.Of(%q) = %d", tt.key, got)
		if tt.slot >= 0 {
			assert.Equal(t, tt.slot, got, "redisslot.Of(%q)", tt.key)
		}
		if tt.sameAs != "" {
			assert.Equal(t, redisslot.Of(tt.sameAs), got, "redisslot.Of(%q) vs redisslot.Of(%q)", tt.key, tt.sameAs)
		}
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	c := StartCluster(t, 3)
	t.Logf("cluster of 3 ready in %v", time.Since(start).Round(time.Millisecond))
	cc := c.ClusterClient(t)
	require.Len(t, c.Masters, 3)
	require.Len(t, c.Addrs, 3)

	t.Run("slots evenly spread", func(t *testing.T) {
		// CLUSTER SHARDS, not the CLUSTER SLOTS that WaitReady checked, so
		// that the assignment is confirmed by a second view.
		shards, err := cc.ClusterShards(ctx).Result()
		require.NoError(t, err)
		owned := make(map[string]int)
		for _, sh := range shards {
			require.Len(t, sh.Nodes, 1, "no replicas")
			n := sh.Nodes[0]
			assert.Equal(t, "master", n.Role)
			assert.Equal(t, "online", n.Health)
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			for _, r := range sh.Slots {
				owned[addr] += int(r.End - r.Start + 1)
			}
		}
		require.Len(t, owned, 3)
		for _, s := range c.Masters {
			assert.InDelta(t, redisslot.Slots/3, owned[s.Addr], 1, "slots of %s", s.Addr)
		}
	})

	t.Run("KeySlot agrees with CLUSTER KEYSLOT", func(t *testing.T) {
		direct := c.Masters[0].Client(t)
		for _, tt := range keySlotTests {
			for _, key := range []string{tt.key, tt.sameAs} {
				want, err := direct.ClusterKeySlot(ctx, key).Result()
				require.NoError(t, err)
				assert.Equal(t, int(want), redisslot.Of(key), "redisslot.Of(%q)", key)
			}
		}
	})

	t.Run("MasterFor", func(t *testing.T) {
		c.FlushAll(t)
		// Write keys until every master has some, then check that each key
		// is where MasterFor says, read from that master directly.
		keys := make(map[*Server][]string)
		for i := 0; len(keys) < len(c.Masters); i++ {
			require.Less(t, i, 1000, "1000 keys and still a master without one")
			key := fmt.Sprintf("key:%d", i)
			require.NoError(t, cc.Set(ctx, key, "value of "+key, 0).Err())
			m := c.MasterFor(key)
			keys[m] = append(keys[m], key)
		}
		for _, m := range c.Masters {
			direct := m.Client(t)
			for _, key := range keys[m] {
				got, err := direct.Get(ctx, key).Result()
				require.NoError(t, err, "GET %s on %s", key, m.Addr)
				assert.Equal(t, "value of "+key, got)
			}
			n, err := direct.DBSize(ctx).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(len(keys[m])), n, "keys on %s", m.Addr)
		}
	})

	t.Run("hash tags", func(t *testing.T) {
		a, b := "{tenant-1}:a", "{tenant-1}:b"
		require.Same(t, c.MasterFor(a), c.MasterFor(b))
		// A multi-key command fails with CROSSSLOT unless the keys share a slot.
		require.NoError(t, cc.MSet(ctx, a, 1, b, 2).Err())
		got, err := c.MasterFor(a).Client(t).MGet(ctx, a, b).Result()
		require.NoError(t, err)
		assert.Equal(t, []any{"1", "2"}, got)
	})

	// Last, as it takes a master down.
	t.Run("restart a master", func(t *testing.T) {
		key := "restart-me"
		m := c.MasterFor(key)
		require.NoError(t, cc.Set(ctx, key, "v", 0).Err())
		m.Kill()
		fast := redis.NewClient(failFast(m.Options()))
		defer fast.Close()
		require.Error(t, fast.Get(ctx, key).Err())
		m.Restart(t)
		c.WaitReady(t) // the restarted node rejoins with the slots in its nodes.conf
		require.NoError(t, cc.Set(ctx, key, "again", 0).Err())
		got, err := m.Client(t).Get(ctx, key).Result()
		require.NoError(t, err)
		assert.Equal(t, "again", got)
	})
}

// TestStartClusterSizes checks clusters of other sizes than TestCluster's.
func TestStartClusterSizes(t *testing.T) {
	t.Parallel()
	for _, masters := range []int{1, 2} {
		t.Run(fmt.Sprint(masters), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := StartCluster(t, masters)
			require.Len(t, c.Masters, masters)
			cc := c.ClusterClient(t)
			for i := range 20 {
				key := fmt.Sprintf("key:%d", i)
				require.NoError(t, cc.Set(ctx, key, i, 0).Err())
				got, err := c.MasterFor(key).Client(t).Get(ctx, key).Int()
				require.NoError(t, err)
				assert.Equal(t, i, got)
			}
		})
	}
}
