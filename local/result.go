package local

import (
	"math"
	"time"
)

// Never is the RetryAfter of a request that can never be admitted, because
// its cost exceeds what the bucket can ever hold (n > Burst, or n > Limit
// for the window algorithms). It is the longest Duration, as
// golang.org/x/time/rate's InfDuration is.
const Never = time.Duration(math.MaxInt64)

// Result is the outcome of one decision. It is returned by value and costs
// no allocation.
//
// Whether the request was admitted is the method Allowed rather than a
// field: a refusal always carries a positive RetryAfter, so the flag would
// repeat it, and four words are what the compiler keeps in registers.
type Result struct {
	// Limit is how many requests the bucket admits at once when full: the
	// Burst for TokenBucket, the Limit for the window algorithms.
	Limit int64

	// Remaining is how many more requests of cost 1 the bucket would admit
	// right now, after this decision.
	Remaining int64

	// RetryAfter is zero when the request was admitted; otherwise how long
	// until the same request would be admitted if nothing else is spent
	// meanwhile (always positive), or Never if it never can be.
	RetryAfter time.Duration

	// ResetAfter is how long until the bucket is back to full, if nothing
	// else is spent meanwhile.
	ResetAfter time.Duration
}

// Allowed reports whether the request was admitted.
func (r Result) Allowed() bool { return r.RetryAfter == 0 }
