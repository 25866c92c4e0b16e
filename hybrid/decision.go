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

// shadowed is d, p's decision of n requests, as p enforces it: a Shadow
// policy's refusal is admitted. A Local policy's, whose decisions are not
// counted otherwise, is counted here; the others' are counted where
// their refusals are (countRefused).
func shadowed(p *policy, d Decision, n int64) Decision {
	if !p.Shadow || d.Allowed() {
		return d
	}
	if p.Mode == Local {
		p.counts.shadow.Add(uint64(max(n, 0)))
	}
	return makeDecision(d.Limit(), d.Remaining(), 0, d.ResetAfter(), d.Degraded())
}

// refusedDecision is a Decision that refuses, to try again after retry.
func refusedDecision(retry time.Duration) Decision { return makeDecision(0, 0, retry, 0, false) }
