package global

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// MarkShards records, for the whole fleet, that key's strict decisions go
// to shards for the next ttl: every Allow on key itself then answers
// with Decision.Shards instead of deciding, so that no node decides on
// the whole key while others decide on its shards, which would admit up
// to twice the limit. If key is already marked, its shard count stays and
// only ttl is renewed. MarkShards returns the shard count in force.
func (r redisStore) MarkShards(ctx context.Context, key string, shards int, ttl time.Duration) (int, error) {
	if shards < 2 || shards > fleet.MaxShards || ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: MarkShards needs 2 to MaxShards (%d) shards and a ttl of 1ms or more; got %d, %v", fleet.ErrInvalid, fleet.MaxShards, shards, ttl)
	}
	marker, err := r.redisKey(key, fleet.Shard{}, "shards")
	if err != nil {
		return 0, err
	}
	v, err := r.runOne(ctx, scriptCall{markShardsScript, []string{marker}, []any{shards, ttl.Milliseconds()}, 1, 0})
	if err != nil {
		return 0, err
	}
	if err := r.check(key, bound{"a shard count", v[0], 2, fleet.MaxShards}); err != nil {
		return 0, err
	}
	return int(v[0]), nil
}

// ChargeAtLeast makes key's strict state show at least used spent now,
// as if used had just been admitted, unless it already shows as much. It
// is how a key merged back from its shards takes over what they had
// spent. Unlike Allow, charging twice charges once, so every node of a
// fleet may charge the same key as it merges back.
func (r redisStore) ChargeAtLeast(ctx context.Context, key string, limit fleet.Limit, used int64) error {
	return r.ChargeShardAtLeast(ctx, key, fleet.Shard{}, limit, used)
}

// ChargeShardAtLeast is ChargeAtLeast on one of key's shards (see
// fleet.ShardsOf): how the shards a key is split into take over what the key
// had spent.
func (r redisStore) ChargeShardAtLeast(ctx context.Context, key string, shard fleet.Shard, limit fleet.Limit, used int64) error {
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("%w: %v", fleet.ErrInvalid, err)
	}
	if used <= 0 {
		return nil
	}
	base, err := r.keyBase(key, shard)
	if err != nil {
		return err
	}
	v, err := r.runOne(ctx, strictCall(base, limit, min(used, fleet.MaxLimit), chargeGCRA, chargeSlidingWindow, 1))
	if err != nil {
		return err
	}
	return r.check(key+shard.String(), bound{"a charge's outcome", v[0], 1, 1})
}

// MarkLeaseShards marks, for the whole fleet, that key's leases are
// split into shards: while the mark stands, Sync on key grants nothing,
// applies none of a report, and answers with fleet.Grant.Shards, so that
// nodes lease from, and report to, fleet.ShardsOf(key, n) instead. The mark
// stands until ttl from now, or later if it was already marked for
// longer (it is never shortened); with shards 0, a mark is only
// extended, never set. After its end, Sync goes on answering with the
// shard count and no time left until EndLeaseShards, so that no node
// leases from key before what the shards spent has been charged to it;
// the mark is dropped by itself after two of limit's windows and twice
// ttl, when its shards' spending no longer counts.
//
// It returns the shard count in force and how long the mark stands: 0
// for a mark that has ended and awaits its merge; 0 and 0 if shards is
// 0 and there was no mark.
func (r redisStore) MarkLeaseShards(ctx context.Context, key string, shards int, ttl time.Duration, limit fleet.Limit) (n int, left time.Duration, err error) {
	switch {
	case shards == 1 || shards < 0 || shards > fleet.MaxShards || ttl < time.Millisecond:
		return 0, 0, fmt.Errorf("%w: MarkLeaseShards needs 0, or 2 to MaxShards (%d), shards and a ttl of 1ms or more; got %d, %v", fleet.ErrInvalid, fleet.MaxShards, shards, ttl)
	case limit.Validate() != nil:
		return 0, 0, fmt.Errorf("%w: %v", fleet.ErrInvalid, limit.Validate())
	}
	marker, err := r.redisKey(key, fleet.Shard{}, "lshards")
	if err != nil {
		return 0, 0, err
	}
	keep := (2*limit.Window + 2*ttl).Milliseconds() + 1
	v, err := r.runOne(ctx, scriptCall{markLease, []string{marker}, []any{shards, micros(ttl), keep}, 2, 0})
	if err != nil {
		return 0, 0, err
	}
	return r.markOf(key, v)
}

// LeaseShardMark reports key's lease mark (see MarkLeaseShards): its
// shard count, 0 if there is none, and how long it stands, 0 if it has
// ended and awaits its merge.
func (r redisStore) LeaseShardMark(ctx context.Context, key string) (shards int, left time.Duration, err error) {
	marker, err := r.redisKey(key, fleet.Shard{}, "lshards")
	if err != nil {
		return 0, 0, err
	}
	v, err := r.runOne(ctx, scriptCall{readLeaseMark, []string{marker}, nil, 2, 0})
	if err != nil {
		return 0, 0, err
	}
	return r.markOf(key, v)
}

// EndLeaseShards drops key's lease mark if it has ended, so that Sync
// leases from key again: call it once key has been charged with what its
// shards spent (ChargeLeasesAtLeast with LeaseUsed of the shards). It
// reports whether key is no longer marked.
func (r redisStore) EndLeaseShards(ctx context.Context, key string) (bool, error) {
	marker, err := r.redisKey(key, fleet.Shard{}, "lshards")
	if err != nil {
		return false, err
	}
	v, err := r.runOne(ctx, scriptCall{endLeaseMark, []string{marker}, nil, 1, 0})
	if err != nil {
		return false, err
	}
	return v[0] == 1, r.check(key, bound{"an end's outcome", v[0], 0, 1})
}

// LeaseUsed returns what the lease states of key's shards (as Sync keeps
// them; the zero Shard is key itself) show spent now under limit, leases
// included, summed: how a key merged back from its shards learns what
// they had spent. It decides and changes nothing, and takes one round
// trip per Redis node.
func (r redisStore) LeaseUsed(ctx context.Context, key string, shards []fleet.Shard, limit fleet.Limit) (int64, error) {
	calls, err := r.leaseStateCalls(leaseUsedScript, key, shards, limit, 0, 0)
	if err != nil {
		return 0, err
	}
	res, err := r.runAll(ctx, calls)
	if err != nil {
		return 0, err
	}
	sum := int64(0)
	for i, v := range res {
		part := key + shards[i].String()
		if err := r.check(part, bound{"used", v[0], 0, math.MaxInt64}); err != nil {
			return 0, err
		}
		if sum > math.MaxInt64-v[0] {
			return 0, r.corrupt(part, "the lease states show more spent than an int64 holds")
		}
		sum += v[0]
	}
	return sum, nil
}

// ChargeLeasesAtLeast makes the lease state of each of key's shards (the
// zero Shard is key itself) show at least used spent now under limit,
// unless it already shows as much. It is how a key split into shards, or
// merged back from them, takes over what was spent before, so that
// neither hands out a fresh bucket; charging twice charges once, so
// every node of a fleet may charge. Nodes not seen for three of the
// fleet's sync intervals are forgotten first, as Sync forgets them, so
// that a node coming back to a state it left long ago reports against
// no lease (a zero interval forgets nobody). One round trip per Redis
// node.
func (r redisStore) ChargeLeasesAtLeast(ctx context.Context, key string, shards []fleet.Shard, limit fleet.Limit, used int64, interval time.Duration) error {
	if interval < 0 {
		return fmt.Errorf("%w: ChargeLeasesAtLeast's interval is %v; it must not be negative", fleet.ErrInvalid, interval)
	}
	stale := int64(0)
	if interval > 0 {
		stale = staleAfter(micros(interval))
	}
	calls, err := r.leaseStateCalls(chargeLease, key, shards, limit, min(max(used, 0), fleet.MaxLimit), stale)
	if err != nil {
		return err
	}
	res, err := r.runAll(ctx, calls)
	if err != nil {
		return err
	}
	for i, v := range res {
		if err := r.check(key+shards[i].String(), bound{"a charge's outcome", v[0], 1, 1}); err != nil {
			return err
		}
	}
	return nil
}

// leaseStateCalls builds one call of script per lease state of key's
// shards.
func (r *Redis) leaseStateCalls(script *redis.Script, key string, shards []fleet.Shard, limit fleet.Limit, n, stale int64) ([]scriptCall, error) {
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", fleet.ErrInvalid, err)
	}
	window := micros(limit.Window)
	sw := "0"
	if limit.Algorithm == local.SlidingWindow {
		sw = "1"
	}
	// A charged state outlives two windows and a minute, as a lease
	// state kept alive by syncs would.
	ttl := (2*window)/1000 + 60_000
	calls := make([]scriptCall, 0, len(shards))
	for _, shard := range shards {
		k, err := r.redisKey(key, shard, "lease")
		if err != nil {
			return nil, err
		}
		calls = append(calls, scriptCall{script, []string{k}, []any{sw, limit.Limit, window, limit.Capacity(), n, ttl, stale}, 1, 0})
	}
	return calls, nil
}
