package hybrid

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/global"
)

// A hot Strict key is split into shards in Redis: Config.HotKeyShards
// keys whose hash tags spread over the Cluster's slots
// (global.ShardKeys), each holding its part of the limit, so that a hot
// key's round trips spread over every master instead of queueing on the
// one that owns it. Decisions go round-robin over the shards, which
// spends them evenly, and a refused one tries the next shard before
// refusing. Strict keys are detected by
// sampling their requests into a heavy-hitter sketch (internal/sketch);
// a key not seen hot for minShardedIntervals merges back, after its own
// key is charged with what the shards had spent, so that the merge hands
// out no fresh bucket.
type shardSet struct {
	keys      []string
	limit     global.Limit   // each shard's: the policy's, divided
	capacity  int64          // each shard's Burst or Limit
	remaining []atomic.Int64 // each shard's remaining at its last decision
	next      atomic.Uint32  // round-robin over the shards
}

// minShardTokens is the least a shard may hold: a limit too small to
// divide is not sharded.
const minShardTokens = 10

// minShardedIntervals is how long a sharded key stays sharded after it
// was last seen hot.
const minShardedIntervals = 10

// newShardSet divides limit over n shards of key, or returns nil if the
// limit is too small to divide.
func newShardSet(key string, limit global.Limit, n int) *shardSet {
	burst := limit.Burst
	if burst == 0 || limit.Algorithm != global.TokenBucket {
		burst = limit.Limit
	}
	per := limit
	per.Limit = limit.Limit / int64(n)
	if limit.Algorithm == global.TokenBucket {
		per.Burst = burst / int64(n)
	}
	capacity := per.Limit
	if limit.Algorithm == global.TokenBucket {
		capacity = per.Burst
	}
	if per.Limit < minShardTokens || capacity < minShardTokens || per.Validate() != nil {
		return nil
	}
	set := &shardSet{keys: global.ShardKeys(key, n), limit: per, capacity: capacity, remaining: make([]atomic.Int64, n)}
	for i := range set.remaining {
		set.remaining[i].Store(capacity)
	}
	return set
}

// decideSharded decides a Strict request on a sharded key: the next shard
// in turn, then the one after if that refused.
func (l *Limiter) decideSharded(ctx context.Context, k *keyState, set *shardSet, n int64) (global.Decision, error) {
	i := int(set.next.Add(1) % uint32(len(set.keys)))
	g, err := l.strict.Allow(ctx, set.keys[i], set.limit, n)
	if err == nil {
		set.remaining[i].Store(g.Remaining)
	}
	if err == nil && !g.Allowed && g.RetryAfter >= 0 && len(set.keys) > 1 {
		j := (i + 1) % len(set.keys)
		if g2, err2 := l.strict.Allow(ctx, set.keys[j], set.limit, n); err2 == nil {
			set.remaining[j].Store(g2.Remaining)
			g = g2
		}
	}
	g.Remaining *= int64(len(set.keys)) // an estimate of the whole key's
	return g, err
}

// shardHot shards the Strict keys the sketch saw hot over the last
// interval and merges back those not seen hot for a while. Sync loop
// only.
func (l *Limiter) shardHot(ctx context.Context, now int64) {
	s := &l.syncs
	if l.hot == nil || now-s.lastHot < int64(l.cfg.Interval) {
		return
	}
	elapsed := time.Duration(now - s.lastHot)
	s.lastHot = now
	for _, h := range l.hot.Hot(elapsed) {
		v, ok := l.keys.Load(h.Key)
		if !ok {
			continue
		}
		k := v.(*keyState)
		if k.pol.Mode != Strict {
			continue
		}
		k.hotAt, k.hotRate = now, h.Rate
		if k.shards.Load() == nil {
			if set := newShardSet(k.key, k.pol.limit, l.cfg.HotKeyShards); set != nil {
				k.shards.Store(set)
				s.sharded = append(s.sharded, k)
			}
		}
	}
	keep := s.sharded[:0]
	for _, k := range s.sharded {
		if now-k.hotAt <= minShardedIntervals*int64(l.cfg.Interval) && !k.retired.Load() {
			keep = append(keep, k)
			continue
		}
		l.unshard(ctx, k)
	}
	clear(s.sharded[len(keep):])
	s.sharded = keep
}

// unshard merges k's shards back: k's own key is charged first with what
// the shards had spent, then decisions go to it again.
func (l *Limiter) unshard(ctx context.Context, k *keyState) {
	set := k.shards.Load()
	if set == nil {
		return
	}
	used := int64(0)
	for i := range set.remaining {
		used += max(0, set.capacity-set.remaining[i].Load())
	}
	if used = min(used, k.pol.capacity); used > 0 && l.fleets[0].closed.Load() {
		ctx, cancel := context.WithTimeout(ctx, l.cfg.StrictTimeout)
		_, _ = l.strict.Allow(ctx, k.key, k.pol.limit, used) // a refusal means it was not idle: nothing to add
		cancel()
	}
	k.shards.Store(nil)
	k.hotRate = 0
}
