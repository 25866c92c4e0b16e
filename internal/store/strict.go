package store

import (
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// The values of a store that decides each request itself: Strict
// policies, which global.Redis serves.

// Decision is the outcome of one strict, per-request decision in a store
// (StrictDecider.Allow).
type Decision struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration // zero when allowed; local.Never if the cost can never be admitted
	ResetAfter time.Duration

	// Shards, when not zero, says that nothing was decided: the key is
	// split fleet-wide into Shards shards (ShardDirectory.MarkShards) for ShardedFor
	// more, and the request must be decided on one of fleet.ShardsOf(key,
	// Shards), with ShardDirectory.AllowShard.
	Shards     int
	ShardedFor time.Duration
}

// StrictCharge is a count of requests a node admitted for a key's strict
// state without its store, for StrictCharger.Charge.
type StrictCharge struct {
	Key   string
	Shard fleet.Shard // the zero Shard: the key itself; else one of fleet.ShardsOf's
	Limit fleet.Limit // the key's limit, or the shard's part of it
	N     int64       // requests; 0 changes nothing but is still sent
}
