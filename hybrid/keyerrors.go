package hybrid

import (
	"log/slog"
	"sync/atomic"
)

// A key the fleet answers with an error of its own (Grant.Err, or a
// Strict decision that wraps fleet.ErrInvalid or fleet.ErrCorrupt) is
// not an outage: the
// fleet is reachable and every other key is served. But the key must
// not be refused forever either, which is what a node that waits for a
// lease that never comes would do, with nothing to show why. So a failing
// key is decided by its policy's FailMode once what it holds is spent,
// its consumption is reported again until the fleet takes it, Health
// counts it, and the first error of each failure is logged.

// keyErrors tracks the keys the fleet could not answer.
type keyErrors struct {
	failing atomic.Int64          // keys whose last answer was an error
	last    atomic.Pointer[error] // the last such error
}

// keyFailed records that the fleet answered k with err.
func (l *Limiter) keyFailed(k *keyState, err error) {
	l.keyErrs.last.Store(&err)
	if !k.failing.Load() && k.failing.CompareAndSwap(false, true) {
		l.keyErrs.failing.Add(1)
		l.wake(k)
		if k.retired.Load() {
			// Forgotten meanwhile: forget sets retired before it
			// uncounts, so one of the two uncounts it, once.
			l.keyForgotten(k)
			return
		}
		l.cfg.Logger.Warn("hybridlimit: a key cannot be decided as its policy says; it follows its FailMode",
			slog.String("policy", k.policy().Name), slog.String("fail_mode", k.policy().OnUnreachable.String()),
			slog.Any("error", err))
	}
}

// keyAnswered records that the fleet answered k again.
func (l *Limiter) keyAnswered(k *keyState) {
	if k.failing.Load() && k.failing.CompareAndSwap(true, false) {
		l.keyErrs.failing.Add(-1)
		l.cfg.Logger.Info("hybridlimit: the fleet answers a key again", slog.String("policy", k.policy().Name))
	}
}

// keyForgotten drops k from the count when it is forgotten.
func (l *Limiter) keyForgotten(k *keyState) {
	if k.failing.Load() && k.failing.CompareAndSwap(true, false) {
		l.keyErrs.failing.Add(-1)
	}
}

// lastKeyError is the last error the fleet answered a key with.
func (l *Limiter) lastKeyError() error {
	if p := l.keyErrs.last.Load(); p != nil {
		return *p
	}
	return nil
}
