package partition

import "time"

// BreakerConfig configures the circuit breaker a node keeps for each
// fleet it calls (hybrid.Config.Breaker): it stops calling a fleet that
// keeps failing, so that the node does not wait on a dead fleet every
// interval, and lets it back only once the fleet has answered several
// times in a row, so that one lucky call does not make it flap.
type BreakerConfig struct {
	// Failures consecutive failures, the last Failures of them within
	// Within of each other, open the breaker. Default 3 within 1s, or
	// within Failures sync intervals if that is longer (see
	// hybrid.Config.Breaker).
	Failures int
	Within   time.Duration
	// Cooldown is how long an open breaker refuses calls before it lets
	// one probe through. Default the sync interval.
	Cooldown time.Duration
	// Successes consecutive successful probes close a half-open breaker;
	// one failure opens it again. Default 3.
	Successes int
}
