package global

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// Reset deletes key's state in one round trip per Redis node, with its
// shards' if it is split (the shard counts its marks hold): the lease
// state, the strict states and the marks. What nodes still hold on
// leases of the key is theirs to spend until their next sync, which
// reports it to the new state.
func (r redisStore) Reset(ctx context.Context, key string) error {
	base, err := r.keyBase(key, fleet.Shard{})
	if err != nil {
		return err
	}
	counts := map[int]bool{}
	if n, _, err := r.LeaseShardMark(ctx, key); err == nil && n > 1 {
		counts[n] = true
	} else if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	switch v, err := r.cfg.Client.Get(ctx, base+"shards").Result(); {
	case err == nil:
		if n, err := strconv.Atoi(v); err == nil && n > 1 && n <= fleet.MaxShards {
			counts[n] = true
		}
	case !errors.Is(err, redis.Nil):
		return r.failed(r.addr, key, err).err // unknown shards would survive the reset
	}
	keys := []string{base + "lease", base + "gcra", base + "sw", base + "shards", base + "lshards"}
	for n := range counts {
		for _, sh := range fleet.ShardsOf(key, n) {
			b, err := r.keyBase(key, sh)
			if err != nil {
				return err
			}
			keys = append(keys, b+"lease", b+"gcra", b+"sw")
		}
	}
	// One DEL a key: a Cluster's keys of one command must share a slot,
	// and shards are spread over slots on purpose.
	pipe := r.cfg.Client.Pipeline()
	for _, k := range keys {
		pipe.Del(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return r.failed(r.addr, key, err).err
	}
	return nil
}
