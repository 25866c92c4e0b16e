package local

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/decision"
)

// Never is the RetryAfter of a request that can never be admitted, because
// its cost exceeds what the bucket can ever hold (n > Burst, or n > Limit
// for the window algorithms). It is the longest Duration, as
// golang.org/x/time/rate's InfDuration is.
const Never = time.Duration(math.MaxInt64)

// Decision is the outcome of one request. It is returned by value and
// costs no allocation. It is the module's one result type: hybrid.Decision
// is this type, so a decision reads the same whether a local.Limiter or a
// fleet made it.
//
// A Decision that comes with an error always refuses, so that a caller who
// checks only Allowed cannot admit a request the limiter could not decide.
//
// Its fields are read through methods so that it stays four machine words,
// which the compiler keeps in registers (a fifth field made every decision
// copy it through the stack and cost 60% more): the degraded flag rides in
// the sign of the stored limit.
type Decision struct {
	limit      int64 // bitwise-complemented when degraded
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

func init() {
	decision.Make = func(limit, remaining int64, retryAfter, resetAfter time.Duration, degraded bool) Decision {
		if degraded {
			limit = ^limit
		}
		return Decision{limit, remaining, retryAfter, resetAfter}
	}
}

// Allowed reports whether the request was admitted.
func (d Decision) Allowed() bool { return d.retryAfter == 0 }

// Limit is how many requests the key admits at once when its bucket is
// full: the Burst for TokenBucket, the Limit for the window algorithms.
// A fleet's limit is fleet-wide.
func (d Decision) Limit() int64 {
	if d.limit < 0 {
		return ^d.limit
	}
	return d.limit
}

// Remaining is how many more requests of cost 1 the key would admit right
// now, after this decision. A fleet's is its best estimate: what the fleet
// had left at the node's last sync plus what the node still holds; other
// nodes' unspent leases are not known to it.
func (d Decision) Remaining() int64 { return d.remaining }

// RetryAfter is zero when the request was admitted; otherwise how long
// until the same request could be admitted if nothing else is spent
// meanwhile (always positive), or Never if it never can be. A fleet's is
// an estimate: for a Hybrid policy, when the node's next lease is due.
func (d Decision) RetryAfter() time.Duration { return d.retryAfter }

// ResetAfter is how long until the key's bucket is back to full, if
// nothing else is spent meanwhile. A fleet's is an estimate as of the
// node's last sync; for a Hybrid token bucket decided from its lease it
// is reckoned from the sync loop's last reading of the clock, so it may
// be overstated by up to about an Interval and a sync's round trip.
func (d Decision) ResetAfter() time.Duration { return d.resetAfter }

// Degraded reports that a fleet limiter decided without its fleet: it
// could not be reached, what the node had leased was spent, and the
// policy's FailMode decided. A local.Limiter never sets it. A decision
// from a lease is the fleet's even while the fleet is out of reach;
// hybrid.Limiter.Health says whether it is.
func (d Decision) Degraded() bool { return d.limit < 0 }
