// Package store names what package hybrid asks of a fleet's store beyond
// fleet.Syncer: strict decisions and their charges, the directories of
// keys split into shards, and a census of the fleet's nodes.
// *global.Redis offers them all through Of (its tests say so),
// gossip.Gossip the census; hybrid checks at New which its Syncer has.
// They are the Redis store's protocol with hybrid, not an API: internal,
// so that a change to it is no user's breaking change.
package store

import (
	"context"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// MaxHold is the longest fleet.Usage.Hold a store grants, in the
// request's Intervals: a longer one fails its key's Grant
// (fleet.ErrInvalid), so that no node makes a lease stand as long as it
// likes. Ten thousand: 1,000 s at the default 100 ms, so that a key
// kept for an IdleTimeout of ten minutes may rest that long (a million
// keys at rests of 100 s, the cap until 2026-11-28, cost Redis a fifth
// of what Strict decisions would: docs/redis.md).
const MaxHold = 10_000

// MaxRest is the longest a lease rests at an Interval of interval µs:
// MaxHold intervals, or for ever past int64 (an Interval of centuries,
// from a hostile node, would wrap into a negative TTL).
func MaxRest(interval int64) int64 {
	if interval > math.MaxInt64/MaxHold {
		return math.MaxInt64
	}
	return MaxHold * interval
}

// StrictDecider decides single requests in the fleet's store. Strict
// policies need a hybrid.Config.Syncer that implements it.
type StrictDecider interface {
	Allow(ctx context.Context, key string, limit fleet.Limit, n int64) (Decision, error)
}

// Resetter forgets, for the whole fleet, what a key has spent.
type Resetter interface {
	// Reset deletes key's state in the store, its own and its shards':
	// its next decision or lease starts from a full bucket.
	Reset(ctx context.Context, key string) error
}

// StrictCharger counts in the fleet's store requests a node admitted for
// Strict keys without it.
type StrictCharger interface {
	// Charge counts each charge's N requests as admitted now, whatever
	// the store has left, but never beyond an empty bucket, in one round
	// trip; a charge of 0 changes nothing. It returns one error per
	// charge (that key's), or an error for the whole call.
	Charge(ctx context.Context, charges []StrictCharge) ([]error, error)
}

// ShardDirectory records, for the whole fleet, which Strict keys are
// split into shards in the store, so that no node decides a key on its
// own while others decide it on its shards, which would admit up to twice
// the limit. See global.Redis's MarkShards and
// ChargeAtLeast for the contract.
type ShardDirectory interface {
	// MarkShards marks key as split into shards for ttl, or renews the
	// mark, and returns the shard count in force. While marked, a
	// StrictDecider's Allow on key answers with Decision.Shards.
	MarkShards(ctx context.Context, key string, shards int, ttl time.Duration) (int, error)
	// ChargeAtLeast makes key show at least used spent; charging twice
	// charges once.
	ChargeAtLeast(ctx context.Context, key string, limit fleet.Limit, used int64) error
	// AllowShard and ChargeShardAtLeast are Allow and ChargeAtLeast on
	// one of key's shards (fleet.ShardsOf), a name no user key reaches.
	AllowShard(ctx context.Context, key string, shard fleet.Shard, limit fleet.Limit, n int64) (Decision, error)
	ChargeShardAtLeast(ctx context.Context, key string, shard fleet.Shard, limit fleet.Limit, used int64) error
}

// LeaseShardDirectory records, for the whole fleet, which Hybrid keys
// lease from shards in the store, and moves what was spent across a
// split or a merge. See global.Redis's methods for the
// contract. The Syncer's lease answers for a marked key carry
// fleet.Grant.Shards.
type LeaseShardDirectory interface {
	// MarkLeaseShards marks key's leases as split into shards until ttl
	// from now, or extends a standing mark to at least that (with shards
	// 0, only extends), and returns the shard count in force and how
	// long the mark stands: 0 once it has ended and awaits its merge.
	MarkLeaseShards(ctx context.Context, key string, shards int, ttl time.Duration, limit fleet.Limit) (int, time.Duration, error)
	// LeaseShardMark returns key's mark: its shard count (0 if none) and
	// how long it stands (0 once it has ended).
	LeaseShardMark(ctx context.Context, key string) (int, time.Duration, error)
	// EndLeaseShards drops key's mark if it has ended, once key has been
	// charged with what its shards spent.
	EndLeaseShards(ctx context.Context, key string) (bool, error)
	// LeaseUsed returns what the lease states of key's shards show
	// spent, summed; the zero Shard is key itself.
	LeaseUsed(ctx context.Context, key string, shards []fleet.Shard, limit fleet.Limit) (int64, error)
	// ChargeLeasesAtLeast makes the lease state of each of key's shards
	// (the zero Shard: key itself) show at least used spent; charging
	// twice charges once. Nodes not seen for three intervals are
	// forgotten first.
	ChargeLeasesAtLeast(ctx context.Context, key string, shards []fleet.Shard, limit fleet.Limit, used int64, interval time.Duration) error
}

// KeyLenLimiter is a store that refuses keys longer than MaxKeyLen bytes,
// as global.Redis does: a Limiter must not accept longer ones, or their
// every call fails.
type KeyLenLimiter interface{ MaxKeyLen() int }

// Census counts a fleet's live nodes, for a node that learns the fleet's
// size from no lease.
type Census interface {
	// Census registers node as live and returns how many nodes have been
	// live within horizon, node included.
	Census(ctx context.Context, node string, horizon time.Duration) (int, error)
}

// lookups are the packages' ways to find a Syncer's store protocol when
// it is not in the Syncer's method set; see Register.
var lookups []func(fleet.Syncer) any

// Register adds a way to find what s offers beyond fleet.Syncer: f
// returns it, or nil if s is not of f's package. A package whose Syncer
// keeps its store protocol out of its public method set (global.Redis)
// registers at init.
func Register(f func(s fleet.Syncer) any) { lookups = append(lookups, f) }

// Of returns what s offers beyond fleet.Syncer, for a type assertion to
// this package's interfaces: what a registered package found for s, or,
// for a Syncer that wraps another (an Unwrap() fleet.Syncer method, as a
// user's instrumented Redis may have), what the wrapped one offers, or s
// itself.
func Of(s fleet.Syncer) any {
	for range 8 { // wrappers of wrappers, within reason
		for _, f := range lookups {
			if v := f(s); v != nil {
				return v
			}
		}
		w, ok := s.(interface{ Unwrap() fleet.Syncer })
		if !ok {
			break
		}
		if s = w.Unwrap(); s == nil {
			return nil
		}
	}
	return s
}
