package global

import (
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
)

// The scripts check every value they read back from Redis (storedNum),
// and their replies are checked again here against what a sane store
// could answer the call: a lease within the burst (none without demand), a
// shard count from 2 to MaxShards, nothing negative that counts or
// lasts. A reply outside that (a script of another version, a store
// that lies, nan read back as an integer) fails its key with
// ErrCorrupt, and is never handed to the caller.

// leaseBound is the most a sane store leases for u: nothing when the
// node demands nothing, else up to the burst (a lease may exceed the
// demand by the node's part of what is free).
func leaseBound(u *fleet.Usage) int64 {
	if u.Demand <= 0 {
		return 0
	}
	return min(u.Limit.Capacity(), fleet.MaxLimit)
}

// pacedBound is the most a sane store paces beside a lease of lease for
// u: nothing unless u asked for a paced SlidingWindow lease, and the two
// together within the limit.
func pacedBound(u *fleet.Usage, lease int64) int64 {
	if !u.Paced || u.Limit.Algorithm != local.SlidingWindow {
		return 0
	}
	return max(0, leaseBound(u)-lease)
}

// ttlBound is the longest TTL a sane store grants u at interval: two
// intervals, or as long as the node asked to rest (Hold, within
// MaxRest), as leaseItem passes it; a lease shard never rests. Unchecked,
// a TTL of centuries wrapped the lease's expiry into the past (the lease
// lapsed as it came), and one of hours rested a key the scripts never
// let rest.
func ttlBound(u *fleet.Usage, interval time.Duration) int64 {
	iv := micros(interval)
	most := int64(math.MaxInt64)
	if iv <= math.MaxInt64/2 {
		most = 2 * iv
	}
	if u.Shard == (fleet.Shard{}) {
		most = max(most, min(int64(u.Hold/time.Microsecond), store.MaxRest(iv)))
	}
	return most
}

// pacedForBound is the longest a sane store paces a lease of paced over:
// none for none, else at most a window (the lease lapses at its edge).
func pacedForBound(u *fleet.Usage, paced int64) int64 {
	if paced == 0 {
		return 0
	}
	return u.Limit.Window.Microseconds()
}

// bound is one number of a reply and the range a sane store keeps it in.
type bound struct {
	what   string
	x      int64
	lo, hi int64
}

// check returns ErrCorrupt for the first of bs out of its range.
func (r *Redis) check(key string, bs ...bound) error {
	for _, b := range bs {
		if b.x < b.lo || b.x > b.hi {
			return r.corrupt(key, "the store answered %s %d; a sane store keeps it in [%d, %d]", b.what, b.x, b.lo, b.hi)
		}
	}
	return nil
}

// corrupt is an error wrapping ErrCorrupt for key, naming the Redis.
func (r *Redis) corrupt(key, format string, a ...any) error {
	return fmt.Errorf("%w: Redis %s, key %q: %s", fleet.ErrCorrupt, r.addr, key, fmt.Sprintf(format, a...))
}

// grantOf reads and checks a lease script's reply v to u (see
// leaseTokenBucket).
func (r *Redis) grantOf(u fleet.Usage, interval time.Duration, v []int64) (fleet.Grant, error) {
	key := u.Key + u.Shard.String()
	if v[8] != 0 {
		err := r.check(key, bound{"a shard count", v[8], 2, fleet.MaxShards}, bound{"a mark lasting µs", v[9], 0, math.MaxInt64})
		return fleet.Grant{Shards: int(v[8]), ShardedFor: durationOf(v[9])}, err
	}
	err := r.check(key,
		bound{"a lease", v[0], 0, leaseBound(&u)},
		bound{"a lease TTL µs", v[1], 0, ttlBound(&u, interval)},
		bound{"used", v[2], 0, math.MaxInt64},
		bound{"remaining", v[3], 0, u.Limit.Capacity()},
		bound{"active nodes", v[4], 1, math.MaxInt32},
		bound{"a weight (millionths)", v[5], 0, 1e6},
		bound{"reset after µs", v[6], 0, math.MaxInt64},
		bound{"a paced lease", v[10], 0, pacedBound(&u, v[0])},
		bound{"a pace lasting µs", v[11], 0, pacedForBound(&u, v[10])},
	)
	if err == nil && v[10] > 0 && v[11] == 0 {
		err = r.corrupt(key, "the store paced a lease of %d over no time", v[10])
	}
	if err != nil {
		return fleet.Grant{}, err
	}
	return fleet.Grant{
		Paced:      v[10],
		PacedFor:   durationOf(v[11]),
		Lease:      v[0],
		TTL:        durationOf(v[1]),
		Used:       v[2],
		Remaining:  v[3],
		Nodes:      int(v[4]),
		Weight:     float64(v[5]) / 1e6,
		ResetAfter: durationOf(v[6]),
	}, nil
}

// decisionOf reads and checks a strict script's reply v for key under
// limit (see strictGCRA).
func (r *Redis) decisionOf(key string, limit fleet.Limit, v []int64) (store.Decision, error) {
	if v[0] == 2 {
		err := r.check(key, bound{"a shard count", v[1], 2, fleet.MaxShards}, bound{"a mark lasting µs", v[3], 0, math.MaxInt64})
		if err != nil {
			return store.Decision{}, err
		}
		return store.Decision{Shards: int(v[1]), ShardedFor: durationOf(v[3])}, nil
	}
	err := r.check(key,
		bound{"a decision", v[0], 0, 1},
		bound{"remaining", v[1], 0, limit.Capacity()},
		bound{"retry after µs", v[2], -1, math.MaxInt64},
		bound{"reset after µs", v[3], 0, math.MaxInt64},
	)
	if err != nil {
		return store.Decision{}, err
	}
	d := store.Decision{Allowed: v[0] == 1, Remaining: v[1], ResetAfter: durationOf(v[3])}
	switch {
	case d.Allowed && v[2] != 0:
		return store.Decision{}, r.corrupt(key, "the store admitted a request with a retry after %d µs", v[2])
	case v[2] < 0:
		d.RetryAfter = local.Never
	default:
		d.RetryAfter = durationOf(v[2])
	}
	return d, nil
}

// markOf reads and checks a lease mark's reply v for key: its shard
// count (0 for none) and how long it stands.
func (r *Redis) markOf(key string, v []int64) (int, time.Duration, error) {
	if v[0] == 0 && v[1] == 0 {
		return 0, 0, nil
	}
	err := r.check(key, bound{"a shard count", v[0], 2, fleet.MaxShards}, bound{"a mark lasting µs", v[1], 0, math.MaxInt64})
	if err != nil {
		return 0, 0, err
	}
	return int(v[0]), durationOf(v[1]), nil
}

// durationOf is us microseconds, at most the longest Duration.
func durationOf(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}
