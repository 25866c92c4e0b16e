// Package breaker is the circuit breaker a hybrid Limiter keeps for each
// fleet it calls: it stops calling a fleet that keeps failing, so that
// the node does not wait on a dead fleet every interval, and lets it
// back only once the fleet has answered several times in a row. Users
// configure it with partition.BreakerConfig; the machine itself is no
// part of the public API.
//
// It is pure: no goroutines, no I/O, no clock of its own. Every method
// takes the time from its caller.
package breaker

import (
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
	"github.com/hybridlimit/hybridlimit/partition"
)

// Defaults for the zero fields of a partition.BreakerConfig.
const (
	DefaultFailures  = 3
	DefaultWithin    = time.Second
	DefaultCooldown  = 10 * time.Second
	DefaultSuccesses = 3
)

// State is a breaker's state.
type State int

const (
	// Closed lets every call through.
	Closed State = iota
	// Open refuses calls until its cool-down has passed.
	Open
	// HalfOpen lets one probe through at a time, and closes after enough
	// of them succeed in a row.
	HalfOpen
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// A Breaker stops a node from calling a syncer that keeps failing, so
// that the node does not wait on a dead fleet every interval, and lets
// it back only once the fleet has answered several times in a row, so
// that one lucky call does not make it flap.
//
// A Breaker is not safe for concurrent use.
type Breaker struct {
	cfg       partition.BreakerConfig
	state     State
	fails     []time.Time // the latest consecutive failures while closed, at most Failures
	openedAt  time.Time
	probing   bool // a half-open probe is in flight
	successes int  // consecutive successful probes
}

// New returns a closed Breaker, or an error naming the first field of
// cfg that is out of range, wrapping partition.ErrInvalidConfig.
func New(cfg partition.BreakerConfig) (*Breaker, error) {
	switch {
	case cfg.Failures < 0:
		return nil, invalidf("partition: BreakerConfig.Failures is %d; it must not be negative", cfg.Failures)
	case cfg.Within < 0:
		return nil, invalidf("partition: BreakerConfig.Within is %v; it must not be negative", cfg.Within)
	case cfg.Cooldown < 0:
		return nil, invalidf("partition: BreakerConfig.Cooldown is %v; it must not be negative", cfg.Cooldown)
	case cfg.Successes < 0:
		return nil, invalidf("partition: BreakerConfig.Successes is %d; it must not be negative", cfg.Successes)
	}
	if cfg.Failures == 0 {
		cfg.Failures = DefaultFailures
	}
	if cfg.Within == 0 {
		cfg.Within = DefaultWithin
	}
	if cfg.Cooldown == 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.Successes == 0 {
		cfg.Successes = DefaultSuccesses
	}
	return &Breaker{cfg: cfg}, nil
}

// State returns the breaker's state at now: an open breaker whose
// cool-down has passed is half-open.
func (b *Breaker) State(now time.Time) State {
	if b.state == Open && now.Sub(b.openedAt) >= b.cfg.Cooldown {
		return HalfOpen
	}
	return b.state
}

// Allow reports whether a call may be made at now. A half-open breaker
// allows one call at a time: the probe; the caller must report its
// outcome with Success or Failure.
func (b *Breaker) Allow(now time.Time) bool {
	switch b.State(now) {
	case Closed:
		return true
	case HalfOpen:
		if b.state == Open {
			b.state, b.successes, b.probing = HalfOpen, 0, false
		}
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
	return false
}

// Success records a call that reached the fleet.
func (b *Breaker) Success() {
	switch b.state {
	case Closed:
		b.fails = b.fails[:0]
	case HalfOpen:
		b.probing = false
		b.successes++
		if b.successes >= b.cfg.Successes {
			b.state, b.fails = Closed, b.fails[:0]
		}
	}
}

// Failure records a call that did not reach the fleet.
func (b *Breaker) Failure(now time.Time) {
	switch b.state {
	case Closed:
		if len(b.fails) == b.cfg.Failures {
			b.fails = append(b.fails[:0], b.fails[1:]...)
		}
		b.fails = append(b.fails, now)
		if len(b.fails) == b.cfg.Failures && now.Sub(b.fails[0]) <= b.cfg.Within {
			b.open(now)
		}
	case HalfOpen:
		b.open(now)
	}
}

func (b *Breaker) open(now time.Time) {
	b.state, b.openedAt, b.probing, b.successes, b.fails = Open, now, false, 0, b.fails[:0]
}

// invalidf is a config error naming its field.
func invalidf(format string, a ...any) error {
	return cfgerr.Wrap(partition.ErrInvalidConfig, fmt.Errorf(format, a...))
}
