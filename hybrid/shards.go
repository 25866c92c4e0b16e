package hybrid

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/sketch"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
)

// A hot Strict key is split into shards in Redis: Config.HotKeyShards
// parts whose hash tags spread over the Cluster's slots
// (fleet.ShardsOf), each holding its part of the limit, so that a hot
// key's round trips spread over every master instead of queueing on the
// one that owns it. Decisions go round-robin over the shards, which
// spends them evenly, and a refused one tries the next shard before
// refusing.
//
// Strict keys are detected by sampling their requests into a
// heavy-hitter sketch (internal/sketch). The split is the fleet's, not
// the node's: a node that finds a key hot marks it in the store
// (store.ShardDirectory.MarkShards) for minShardedIntervals, and renews the
// mark every interval it still finds it hot; any node that asks the key
// itself while it is marked is told to use the shards, and does until
// the mark it was told of runs out; then it asks again, deciding nothing,
// and stays while another node keeps the mark alive. Had each node decided alone, a node
// on the shards and one on the key would each see the whole limit.
//
// The node that splits a key charges each shard with its part of what
// the key had spent. When the mark lapses, every node merges back, and
// charges the key with what its shards had spent as it last saw them; the
// hot nodes also charge it at every renewal. Charges are idempotent (the
// key shows the largest), so neither the split nor the merge hands out a
// fresh bucket, however many nodes take part.
type shardSet struct {
	keys      []fleet.Shard  // the key's shards in the store
	limit     fleet.Limit    // each shard's: the policy's, divided
	capacity  int64          // each shard's Burst or Limit
	remaining []atomic.Int64 // each shard's remaining at its last decision
	seen      []atomic.Int64 // when, on the Limiter's clock
	next      atomic.Uint32  // round-robin over the shards
}

// minShardTokens is the least a shard may hold: a limit too small to
// divide is not sharded.
const minShardTokens = 10

// minShardedIntervals is how long a sharded key stays sharded after a
// node last found it hot.
const minShardedIntervals = 10

// splitLimit is each of n shards' part of limit, and its capacity (its
// Burst, or its Limit for a sliding window). A part is never below one.
func splitLimit(limit fleet.Limit, n int) (per fleet.Limit, capacity int64) {
	per = limit
	per.Limit = max(1, limit.Limit/int64(n))
	if limit.Algorithm != local.TokenBucket {
		return per, per.Limit
	}
	burst := limit.Burst
	if burst == 0 {
		burst = limit.Limit
	}
	per.Burst = max(1, burst/int64(n))
	return per, per.Burst
}

// divisible reports whether a node may split limit into n shards itself:
// each must hold at least minShardTokens. A node told by the fleet's mark
// to use shards does so whatever this says.
func divisible(limit fleet.Limit, n int) bool {
	per, capacity := splitLimit(limit, n)
	return per.Limit >= minShardTokens && capacity >= minShardTokens
}

// newShardSet divides limit over n shards of key.
func newShardSet(key string, limit fleet.Limit, n int) *shardSet {
	per, capacity := splitLimit(limit, n)
	set := &shardSet{keys: fleet.ShardsOf(key, n), limit: per, capacity: capacity,
		remaining: make([]atomic.Int64, n), seen: make([]atomic.Int64, n)}
	for i := range set.remaining {
		set.remaining[i].Store(capacity)
	}
	return set
}

// used estimates what the shards have spent at now: from each shard's
// remaining at this node's last decision on it, less what the shard has
// refilled since at its rate. A sliding window empties no faster than
// that, so the estimate errs toward charging more, by at most one
// window's refill.
func (set *shardSet) used(now int64) int64 {
	perNs := float64(set.limit.Limit) / float64(set.limit.Window)
	u := int64(0)
	for i := range set.remaining {
		spent := set.capacity - set.remaining[i].Load()
		refilled := int64(perNs * float64(now-set.seen[i].Load()))
		u += max(0, spent-refilled)
	}
	return u
}

// adopt puts k on the shards the fleet split it into, as g said, and
// returns them. k stays on them for at most one and a half intervals
// (less if the mark ends sooner) before the mark is confirmed again: the
// hot nodes renew it every interval, and a mark lost with a Redis
// restart, or renewed with another shard count, is noticed within that
// time, not after the whole mark.
func (k *keyState) adopt(g store.Decision, now int64, interval time.Duration) *shardSet {
	k.shardUntil.Store(now + int64(min(g.ShardedFor, interval*3/2)))
	if set := k.shards.Load(); set != nil && len(set.keys) == g.Shards {
		return set
	}
	set := newShardSet(k.key, k.policy().limit, g.Shards)
	k.shards.Store(set)
	return set
}

// saw records shard i's remaining at now.
func (set *shardSet) saw(i int, remaining, now int64) {
	set.remaining[i].Store(remaining)
	set.seen[i].Store(now)
}

// decideSharded decides a Strict request on a sharded key: the next shard
// in turn, then the one after if that refused.
func (l *Limiter) decideSharded(ctx context.Context, k *keyState, set *shardSet, n int64) (store.Decision, error) {
	st := l.dir
	if st == nil {
		return store.Decision{}, fmt.Errorf("hybrid: Config.Syncer split key %q into shards, but %T keeps no directory of sharded keys", k.key, l.cfg.Syncer)
	}
	i := int(set.next.Add(1) % uint32(len(set.keys)))
	g, err := st.AllowShard(ctx, k.key, set.keys[i], set.limit, n)
	if err == nil {
		set.saw(i, g.Remaining, l.now())
	}
	if err == nil && !g.Allowed && g.RetryAfter >= 0 && len(set.keys) > 1 {
		j := (i + 1) % len(set.keys)
		if g2, err2 := st.AllowShard(ctx, k.key, set.keys[j], set.limit, n); err2 == nil {
			set.saw(j, g2.Remaining, l.now())
			g = g2
		}
	}
	g.Remaining *= int64(len(set.keys)) // an estimate of the whole key's
	return g, err
}

// shardHot marks in the store the Strict keys the sketch saw hot over the
// last interval, or renews their marks, and merges back the keys whose
// mark has run out, including those a node that never shards was told to
// put on shards. Sync loop only.
func (l *Limiter) shardHot(ctx context.Context, now int64) {
	s := &l.syncs
	if l.hot != nil && now-s.lastHot >= int64(l.cfg.Interval) {
		elapsed := time.Duration(now - s.lastHot)
		s.lastHot = now
		l.markHot(ctx, now, l.hot.Hot(elapsed))
	}
	keep := s.sharded[:0]
	for _, k := range s.sharded {
		if !k.retired.Load() && (now < k.shardUntil.Load() || l.stillMarked(ctx, k, now)) {
			keep = append(keep, k)
			continue
		}
		k.listed = false
		l.unshard(ctx, k)
	}
	clear(s.sharded[len(keep):])
	s.sharded = keep
}

// markHot marks the hot Strict keys as split, or renews their marks.
// Sync loop only.
func (l *Limiter) markHot(ctx context.Context, now int64, hot []sketch.HotKey) {
	ttl := minShardedIntervals * l.cfg.Interval
	for _, h := range hot {
		k, ok := l.keys.Load(h.Key)
		if !ok || !l.fleets[0].closed.Load() {
			continue
		}
		if k.policy().Mode != Strict {
			continue
		}
		set := k.shards.Load()
		if set == nil && !divisible(k.policy().limit, l.cfg.HotKeyShards) {
			continue
		}
		// What the key, or the shards it was on, had spent, read before
		// the mark sends decisions elsewhere.
		var spent int64
		if set == nil {
			if d, err := l.peek(ctx, k); err == nil && d.Shards == 0 {
				spent = max(0, k.policy().capacity-d.Remaining)
			}
		} else {
			spent = set.used(now)
		}
		mctx, cancel := context.WithTimeout(ctx, l.cfg.StrictTimeout)
		n, err := l.dir.MarkShards(mctx, k.key, l.cfg.HotKeyShards, ttl)
		cancel()
		if err != nil {
			continue
		}
		k.more().hotRate = h.Rate
		if set != nil {
			// Charged at every renewal, so that the key is charged even
			// if this node is not the first to merge it back.
			l.chargeKey(ctx, k, spent)
		}
		if set == nil || len(set.keys) != n {
			// A new split, or the fleet's mark has another count (it was
			// lost and set again by a node with other settings): the new
			// shards are charged before requests are sent to them.
			set = newShardSet(k.key, k.policy().limit, n)
			l.chargeShards(ctx, k.key, set, spent)
			k.shards.Store(set)
		}
		k.adopt(store.Decision{Shards: n, ShardedFor: ttl}, now, l.cfg.Interval)
		l.list(k)
	}
}

// peek asks k's own Redis key how it stands, deciding nothing: what it
// has left, or the fleet's mark if the key is split.
func (l *Limiter) peek(ctx context.Context, k *keyState) (store.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StrictTimeout)
	defer cancel()
	return l.strict.Allow(ctx, k.key, k.policy().limit, 0)
}

// chargeKey charges k's own Redis key with at least used spent.
func (l *Limiter) chargeKey(ctx context.Context, k *keyState, used int64) {
	if used = min(used, k.policy().capacity); used > 0 {
		ctx, cancel := context.WithTimeout(ctx, l.cfg.StrictTimeout)
		_ = l.dir.ChargeAtLeast(ctx, k.key, k.policy().limit, used)
		cancel()
	}
}

// chargeShards charges each of the shards key was just split into with
// its part of what the key had spent, so that the split hands out no fresh
// bucket.
func (l *Limiter) chargeShards(ctx context.Context, key string, set *shardSet, spent int64) {
	per := spent / int64(len(set.keys))
	st := l.dir
	if per <= 0 || st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.StrictTimeout)
	defer cancel()
	for _, sh := range set.keys {
		_ = st.ChargeShardAtLeast(ctx, key, sh, set.limit, per)
	}
}

// stillMarked asks the store, deciding nothing, whether k's mark stands
// past what this node last heard, as it does while another node renews
// it, and if so keeps k on its shards until the mark's new end.
func (l *Limiter) stillMarked(ctx context.Context, k *keyState, now int64) bool {
	if !l.fleets[0].closed.Load() {
		return true // cannot ask: stay as the fleet last was
	}
	g, err := l.peek(ctx, k)
	if err != nil || g.Shards == 0 {
		return err != nil
	}
	k.adopt(g, now, l.cfg.Interval)
	return true
}

// list keeps k among the sharded keys the sync loop watches. Sync loop
// only.
func (l *Limiter) list(k *keyState) {
	if !k.listed {
		k.listed = true
		l.syncs.sharded = append(l.syncs.sharded, k)
	}
}

// unshard merges k's shards back: k's own key is charged first with what
// the shards had spent, then decisions go to it again. If the fleet's
// mark still stands, the key's first decision finds it and k is put back
// on the shards. Sync loop only.
func (l *Limiter) unshard(ctx context.Context, k *keyState) {
	if set := k.shards.Load(); set != nil {
		l.mergeShards(ctx, k, set)
	}
	if k.rare != nil {
		k.rare.hotRate = 0
	}
}

// mergeShards takes k off set, charging k's own key with what the shards
// had spent as this node last saw them, less what has refilled since. Any
// goroutine; only the first to take k off set charges.
func (l *Limiter) mergeShards(ctx context.Context, k *keyState, set *shardSet) {
	if k.shards.CompareAndSwap(set, nil) && l.fleets[0].closed.Load() {
		l.chargeKey(ctx, k, set.used(l.now()))
	}
}
