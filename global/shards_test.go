package global_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redisslot"
)

func TestShardKeys(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"tenant-1", "weird{key}%", ""} {
		for _, n := range []int{1, 3, 12} {
			keys := global.ShardKeys(key, n)
			assert.Len(t, keys, n)
			seen := map[string]bool{}
			for i, k := range keys {
				assert.False(t, seen[k], "distinct")
				seen[k] = true
				// The slot Redis computes for the key as global names it.
				slot := redisslot.Of(global.RedisKeyForTest("hl:", k, "gcra"))
				assert.GreaterOrEqual(t, slot, i*redisslot.Slots/n, "%q shard %d", key, i)
				assert.Less(t, slot, (i+1)*redisslot.Slots/n, "%q shard %d", key, i)
			}
		}
	}
}
