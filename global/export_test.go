package global

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

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

// The store protocol's methods (see redisStore), on *Redis for the
// tests, which call them as hybrid does through store.Of.
func (r *Redis) Allow(ctx context.Context, key string, limit fleet.Limit, n int64) (store.Decision, error) {
	return redisStore{r}.Allow(ctx, key, limit, n)
}
func (r *Redis) MaxKeyLen() int { return redisStore{r}.MaxKeyLen() }
func (r *Redis) AllowShard(ctx context.Context, key string, shard fleet.Shard, limit fleet.Limit, n int64) (store.Decision, error) {
	return redisStore{r}.AllowShard(ctx, key, shard, limit, n)
}
func (r *Redis) Census(ctx context.Context, node string, horizon time.Duration) (int, error) {
	return redisStore{r}.Census(ctx, node, horizon)
}
func (r *Redis) Charge(ctx context.Context, charges []store.StrictCharge) ([]error, error) {
	return redisStore{r}.Charge(ctx, charges)
}
func (r *Redis) ChargeAtLeast(ctx context.Context, key string, limit fleet.Limit, used int64) error {
	return redisStore{r}.ChargeAtLeast(ctx, key, limit, used)
}
func (r *Redis) ChargeLeasesAtLeast(ctx context.Context, key string, shards []fleet.Shard, limit fleet.Limit, used int64, interval time.Duration) error {
	return redisStore{r}.ChargeLeasesAtLeast(ctx, key, shards, limit, used, interval)
}
func (r *Redis) ChargeShardAtLeast(ctx context.Context, key string, shard fleet.Shard, limit fleet.Limit, used int64) error {
	return redisStore{r}.ChargeShardAtLeast(ctx, key, shard, limit, used)
}
func (r *Redis) EndLeaseShards(ctx context.Context, key string) (bool, error) {
	return redisStore{r}.EndLeaseShards(ctx, key)
}
func (r *Redis) LeaseShardMark(ctx context.Context, key string) (shards int, left time.Duration, err error) {
	return redisStore{r}.LeaseShardMark(ctx, key)
}
func (r *Redis) LeaseUsed(ctx context.Context, key string, shards []fleet.Shard, limit fleet.Limit) (int64, error) {
	return redisStore{r}.LeaseUsed(ctx, key, shards, limit)
}
func (r *Redis) MarkLeaseShards(ctx context.Context, key string, shards int, ttl time.Duration, limit fleet.Limit) (n int, left time.Duration, err error) {
	return redisStore{r}.MarkLeaseShards(ctx, key, shards, ttl, limit)
}
func (r *Redis) MarkShards(ctx context.Context, key string, shards int, ttl time.Duration) (int, error) {
	return redisStore{r}.MarkShards(ctx, key, shards, ttl)
}

// DefaultPrefix is the Prefix a zero RedisConfig gets.
const DefaultPrefix = defaultPrefix
