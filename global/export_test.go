package global

import "github.com/hybridlimit/hybridlimit/fleet"

// RedisKeyForTest is the Redis key a Redis with prefix writes for key.
func RedisKeyForTest(prefix, key, suffix string) string {
	return RedisShardKeyForTest(prefix, key, fleet.Shard{}, suffix)
}

// RedisShardKeyForTest is the Redis key a Redis with prefix writes for
// key's shard.
func RedisShardKeyForTest(prefix, key string, shard fleet.Shard, suffix string) string {
	r := &Redis{cfg: RedisConfig{Prefix: prefix, MaxKeyLen: 1 << 20}}
	k, _ := r.redisKey(key, shard, suffix)
	return k
}

// SetBatchKeysForTest sets the most keys a lease batch carries, for a
// measurement, and returns the old value.
func SetBatchKeysForTest(n int) int {
	old := batchKeys
	batchKeys = n
	return old
}
