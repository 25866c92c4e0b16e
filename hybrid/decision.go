package hybrid

import (
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// Never is the RetryAfter of a request that can never be admitted, because
// its cost exceeds what the policy can ever hold.
const Never = local.Never

// Decision is the outcome of one request. It is returned by value and costs
// no allocation. A Decision returned with an error always refuses, so
// that a caller who checks only Allowed cannot admit a request the
// Limiter could not decide.
//
// Its fields are read through methods so that it stays four machine words,
// which the compiler keeps in registers: the degraded flag rides in the
// sign of the stored limit.
type Decision struct {
	limit      int64 // the policy's limit; bitwise-complemented when degraded
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
}

// Allowed reports whether the request was admitted.
func (d Decision) Allowed() bool { return d.retryAfter == 0 }

// Limit is the policy's capacity: Burst for a token bucket, Limit for the
// window algorithms. It is fleet-wide for Hybrid and Strict policies.
func (d Decision) Limit() int64 {
	if d.limit < 0 {
		return ^d.limit
	}
	return d.limit
}

// Remaining is the best estimate of how many more requests of cost 1 the
// key may make now. For a Hybrid policy it is fleet-wide: what the fleet
// had left at this node's last sync, plus what this node still holds of its
// lease. Other nodes' unspent leases are not known to it.
func (d Decision) Remaining() int64 { return d.remaining }

// RetryAfter is zero when the request was admitted; otherwise a positive
// estimate of when the same request could be, or Never if it never can
// be. For a Hybrid policy it is when this node's next lease is due.
func (d Decision) RetryAfter() time.Duration { return d.retryAfter }

// ResetAfter estimates how long until the key's bucket is full again, if
// nothing more is spent.
func (d Decision) ResetAfter() time.Duration { return d.resetAfter }

// Degraded reports whether the decision was made without the fleet: it
// could not be reached, the lease was spent, and the policy's FailMode
// decided. A decision from a lease is the fleet's, even while the fleet
// is out of reach; Limiter.Health says whether it is.
func (d Decision) Degraded() bool { return d.limit < 0 }

// fromLocal converts a local bucket's result.
func fromLocal(r local.Result, degraded bool) Decision {
	d := Decision{limit: r.Limit, remaining: r.Remaining, retryAfter: r.RetryAfter, resetAfter: r.ResetAfter}
	if degraded {
		d.limit = ^d.limit
	}
	return d
}

// refusedDecision is a Decision that refuses, to try again after retry.
func refusedDecision(retry time.Duration) Decision { return Decision{retryAfter: retry} }
