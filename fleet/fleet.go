// Package fleet is the contract between a node and the rest of its
// fleet: the Syncer interface and the values it takes and returns.
//
// A node calls its Syncer once per sync interval with every key it touched
// since the last call: what it consumed and what it expects to need. The
// Syncer answers, per key, what the node may spend until the next call (its
// lease) and what it knows of the fleet: global usage, active nodes, this
// node's weight. Package global (Redis) and package gossip (memberlist)
// implement it, as do the simulator's fakes; package hybrid depends on
// this package alone, so that a program that syncs by gossip links no
// Redis client.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/enumtext"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// A Syncer reconciles one node's consumption with the fleet.
//
// Implementations must be safe for concurrent use, honour ctx's deadline,
// and report a fleet they cannot reach with an error that wraps
// ErrUnreachable, so the caller can tell an outage (keep limiting locally)
// from a mistake (fix the request).
type Syncer interface {
	// Sync reports req's consumption and returns a Grant for each of
	// req.Keys, in the same order. A key-level mistake is reported in that
	// Grant's Err, and so is a key whose part of a store is down while
	// other parts answer; an error from Sync itself concerns the whole
	// call.
	Sync(ctx context.Context, req *Request) (*Response, error)
}

// MaxLimit is the largest Limit.Limit and Limit.Burst, and the most that
// Usage.Consumed and Usage.Demand count: 2^53, the largest count Redis's
// Lua numbers (doubles) hold exactly.
const MaxLimit = 1 << 53

// Limit is a key's fleet-wide limit.
type Limit struct {
	// Algorithm is local.TokenBucket or local.SlidingWindow: the two a
	// fleet shares (a fixed window or a log of every request is for one
	// node alone).
	Algorithm local.Algorithm
	// Limit is how many requests the whole fleet may make per Window.
	Limit int64
	// Window is the period of Limit.
	Window time.Duration
	// Burst is TokenBucket's capacity; zero means Limit. SlidingWindow
	// ignores it.
	Burst int64
}

// Validate reports the first field of l that is out of range.
func (l Limit) Validate() error {
	switch {
	case l.Algorithm != local.TokenBucket && l.Algorithm != local.SlidingWindow:
		return fmt.Errorf("fleet: Limit.Algorithm is %v; a fleet shares TokenBucket or SlidingWindow", l.Algorithm)
	case l.Limit < 1 || l.Limit > MaxLimit:
		return fmt.Errorf("fleet: Limit.Limit is %d; it must be between 1 and MaxLimit (%d)", l.Limit, int64(MaxLimit))
	case l.Window < time.Millisecond:
		return fmt.Errorf("fleet: Limit.Window is %v; it must be at least 1ms", l.Window)
	case l.Burst < 0 || l.Burst > MaxLimit:
		return fmt.Errorf("fleet: Limit.Burst is %d; it must be between 0 and MaxLimit (%d)", l.Burst, int64(MaxLimit))
	}
	return nil
}

// Capacity is what l's bucket holds: Burst for a TokenBucket that sets
// it, else Limit.
func (l Limit) Capacity() int64 {
	if l.Algorithm == local.TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Request is one node's report for one sync.
type Request struct {
	// Node identifies the calling node; it must be stable across syncs and
	// unique in the fleet.
	Node string
	// Interval is how often the node syncs. A lease is sized to last it,
	// and a node not heard from for a few intervals stops counting as
	// active.
	Interval time.Duration
	// Shares is how the fleet's budget is split between nodes that all
	// want more than is available. Default DemandWeighted.
	Shares Shares
	// Keys are the keys the node touched since its last sync, and those
	// it holds a lease on.
	Keys []Usage
	// Fallback is how the node limits itself while it cannot reach the
	// fleet: the hybrid Limiter's ladder, with the floor applied. A store
	// that the rest of the fleet still reaches reserves a node it stops
	// hearing from on this schedule, at the node's last share of the
	// rate, so that the nodes it hears do not take the whole limit while
	// the silent one spends its part; the reserve is settled against what
	// the node reports when it is back. The last step, which lasts for
	// ever, is not reserved: a node that died is given up at the end of
	// the others. Nil reserves nothing. (Redis reserves for token buckets
	// and sliding windows alike; see docs/partitions.md.)
	Fallback []partition.Step
}

// MaxFallbackSteps is the most steps a Request.Fallback may have: a
// store walks them for every silent node of every key it leases.
const MaxFallbackSteps = 16

// Validate reports, wrapping ErrInvalid, what makes r unusable by any
// Syncer: nil, a non-positive Interval, an unknown Shares. (Keys are
// checked one by one, each failing its own Grant.)
func (r *Request) Validate() error {
	switch {
	case r == nil:
		return fmt.Errorf("%w: nil Request", ErrInvalid)
	case r.Interval <= 0:
		return fmt.Errorf("%w: Request.Interval is %v; it must be positive", ErrInvalid, r.Interval)
	case r.Shares != DemandWeighted && r.Shares != Equal:
		return fmt.Errorf("%w: Request.Shares %d is not a known strategy", ErrInvalid, int(r.Shares))
	}
	if len(r.Fallback) > MaxFallbackSteps {
		return fmt.Errorf("%w: Request.Fallback has %d steps; at most MaxFallbackSteps (%d)", ErrInvalid, len(r.Fallback), MaxFallbackSteps)
	}
	var last time.Duration
	for i, st := range r.Fallback {
		finite := i < len(r.Fallback)-1 || st.Until != 0
		if finite && st.Until <= last || !(st.Factor >= 0 && st.Factor <= 1) {
			return fmt.Errorf("%w: Request.Fallback[%d] is %+v; Until must grow (the last may be 0: for ever) and Factor be in [0, 1]", ErrInvalid, i, st)
		}
		last = st.Until
	}
	return nil
}

// Shares is how a contended budget is split between nodes.
type Shares int

const (
	// DemandWeighted gives each node a part of the budget proportional to
	// its reported demand: a node serving 80% of the traffic may hold 80%
	// of the budget.
	DemandWeighted Shares = iota
	// Equal gives each active node 1/N of the budget, whatever its demand.
	Equal
)

// String returns the strategy's name.
func (s Shares) String() string {
	switch s {
	case DemandWeighted:
		return "demandweighted"
	case Equal:
		return "equal"
	}
	return fmt.Sprintf("Shares(%d)", int(s))
}

var sharesNames = []enumtext.Name[Shares]{{Text: "demandweighted", Value: DemandWeighted}, {Text: "equal", Value: Equal}}

// MarshalText returns the strategy's name, for config files; a value
// that is not a Shares is an error.
func (s Shares) MarshalText() ([]byte, error) {
	return enumtext.Marshal("fleet: Shares", s.String(), s == DemandWeighted || s == Equal)
}

// UnmarshalText sets s from its name: "demandweighted" or "equal", in
// any case, with or without '_' or '-'.
func (s *Shares) UnmarshalText(text []byte) error {
	v, err := enumtext.Parse("fleet: Shares", text, sharesNames)
	if err == nil {
		*s = v
	}
	return err
}

// Usage is what a node did with one key, or one of its shards, since its
// last sync.
type Usage struct {
	Key string
	// Shard, when not zero, is the shard of Key (see ShardsOf) this
	// usage is for: a key whose leases a Syncer split (Grant.Shards) is
	// leased from, and reported to, its shards, each with its part of
	// the limit. The zero Shard is the key itself. A Syncer that does
	// not split keys refuses a Usage with a Shard.
	Shard Shard
	Limit Limit
	// Consumed is how many requests the node admitted for the key since
	// its last sync. Consumption beyond the last lease (say, spent while
	// the fleet was unreachable) is charged to the global budget. It
	// counts up to MaxLimit.
	Consumed int64
	// Series and Total make the report idempotent. Total counts all the
	// node admitted for the key since Series began: a node picks a new
	// Series (from 1 to MaxLimit, at random) whenever it starts counting
	// afresh. A Syncer that has applied a report of the same Series
	// applies at most what Total adds to it, so that a report applied
	// once but sent again (its reply lost, a retry, a pipeline half
	// applied) counts once. With Series 0, or a Series the Syncer has not
	// seen, Consumed counts as it is.
	Series uint64
	Total  int64
	// Demand is how many requests the node expects to see for the key
	// over the next interval. The Syncer leases up to this much, or more
	// while the key is well under its limit: its part of what the fleet
	// has free, so a burst finds room. A Demand of zero leases nothing.
	// It counts up to MaxLimit.
	Demand int64
	// Paced says the node can spend a paced lease (Grant.Paced): a
	// SlidingWindow lease may then also hand it what the previous
	// window's weight frees until its next sync, released over time.
	// A Syncer may ignore it.
	Paced bool
	// Hold, when longer than two Intervals, is the longest the node may
	// go without syncing the key while its lease covers its traffic (the
	// hybrid Limiter rests such a key: see its Config.IdleTimeout). A
	// Syncer may then grant a key well under its limit a lease that
	// stands that long (Grant.TTL) and count the node active on the key
	// until it lapses, so that a key far from its limit costs a sync per
	// Hold, not per Interval. Zero, or two Intervals or less: the lease
	// stands two Intervals. At most 10,000 Intervals; a Syncer fails the
	// key's Grant beyond that. (Redis grants it to token buckets, and to
	// sliding windows until their window's edge; gossip syncs in memory
	// and ignores it.)
	Hold time.Duration
}

// Response is a Syncer's answer to a Request.
type Response struct {
	// Grants holds one Grant per Request.Keys entry, in the same order.
	Grants []Grant

	// Partitioned, when positive, says the Syncer reaches only a minority
	// of the fleet it last knew, a side of a network split, and has for
	// that long. Its grants then count only the nodes it can hear, so the
	// caller should limit itself as if cut off for that long (the hybrid
	// Limiter climbs down its emergency ladder). A store every node
	// reaches directly, like Redis, leaves it zero.
	Partitioned time.Duration
}

// Grant is what a node may do with one key until its next sync, and the
// fleet's state as the Syncer saw it.
type Grant struct {
	// Lease is how many requests the node may admit for the key before its
	// next sync. The sum of live leases never exceeds the global budget.
	Lease int64
	// TTL is how long the lease stands; past it, unspent tokens return to
	// the fleet and the node should not spend them.
	TTL time.Duration
	// Used is the fleet's consumption in the current window, leases
	// included (TokenBucket: the tokens missing from a full bucket).
	Used int64
	// Remaining is what the fleet could still grant now.
	Remaining int64
	// Nodes is how many nodes are active on the key.
	Nodes int
	// Weight is this node's share of the key's budget, in [0, 1]: its part
	// of the demand, or 1/Nodes with Equal shares.
	Weight float64
	// ResetAfter is how long until the fleet's bucket is full again, if
	// nothing more is spent.
	ResetAfter time.Duration
	// Paced, for a Usage that asked for it, is how many more requests the
	// node may admit on top of Lease, released evenly over PacedFor from
	// when the grant arrives: a SlidingWindow's previous window weighs
	// less as time passes, and what it frees until the node's next sync
	// is leased ahead, counted now, spendable only as it frees. Zero for
	// none; Lease+Paced never exceeds the limit.
	Paced    int64
	PacedFor time.Duration
	// Err is set if this key failed alone: its usage was rejected (a
	// bad limit or key, wrapping ErrInvalid), the store's state for it
	// is corrupt (wrapping ErrCorrupt), or the part of the store that
	// holds it could not be reached while other parts answered (wrapping
	// ErrUnreachable: a Redis Cluster master down). The other fields are
	// then zero. A Sync that reaches no part of the store fails as a
	// whole.
	Err error

	// Shards, when not zero, says that nothing was granted and none of
	// the reported consumption was applied: the key's leases are split
	// fleet-wide into Shards shards (global.Redis splits hot keys' leases) for
	// ShardedFor more (0 once the split has ended and awaits its merge),
	// and are to be taken from, and consumption reported to, the key's
	// ShardsOf(key, Shards), in Usage.Shard. Only a Syncer that shards
	// keys sets it.
	Shards     int
	ShardedFor time.Duration
}

// ErrUnreachable is wrapped by errors that mean the fleet could not be
// reached, or cannot take writes: a connection refused or reset, a
// timeout, a cluster that is down, a Redis out of memory or read-only.
// The caller should keep limiting locally and try again later.
var ErrUnreachable = errors.New("fleet: unreachable")

// ErrInvalid is wrapped by errors that mean the request itself was wrong;
// retrying it unchanged will fail again.
var ErrInvalid = errors.New("fleet: invalid request")

// ErrCorrupt is wrapped by errors that mean the fleet's store holds, or
// answered, for one key, what no node of the fleet could have written:
// a number out of range (nan, a negative count, a shard count of 0), a
// value of another type. Values read back from the store are not
// trusted, and nothing is leased, decided or charged from such a value.
// It is that key's failure, not an outage (the store answered) nor the
// caller's mistake: the caller should treat the key as it treats a key
// the fleet cannot answer (its policy's FailMode), and say so. The key
// recovers when its state expires or is deleted.
var ErrCorrupt = errors.New("fleet: corrupt state in the store")

// ErrVersion is wrapped by the error of a shared document's Save
// (global.Document, gossip.Document) when the document is no longer the
// version the change was made to: another node saved first. Load it
// again and redo the change.
var ErrVersion = errors.New("fleet: the document changed since it was read; load it again")
