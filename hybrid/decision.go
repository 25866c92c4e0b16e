package hybrid

import (
	"time"

	"github.com/hybridlimit/hybridlimit/internal/decision"
	"github.com/hybridlimit/hybridlimit/local"
)

// Decision is the outcome of one request: local.Decision, the module's one
// result type. Its Limit and Remaining are fleet-wide for Hybrid and
// Strict policies; Degraded says the fleet could not be reached and the
// policy's FailMode decided. A request whose cost exceeds what the policy
// can ever hold is refused with RetryAfter local.Never.
type Decision = local.Decision

// makeDecision builds a Decision; package local provides it (see
// internal/decision).
var makeDecision = decision.Make.(func(limit, remaining int64, retryAfter, resetAfter time.Duration, degraded bool) Decision)

// degrade marks d as decided without the fleet.
func degrade(d Decision) Decision {
	return makeDecision(d.Limit(), d.Remaining(), d.RetryAfter(), d.ResetAfter(), true)
}

// refusedDecision is a Decision that refuses, to try again after retry.
func refusedDecision(retry time.Duration) Decision { return makeDecision(0, 0, retry, 0, false) }
