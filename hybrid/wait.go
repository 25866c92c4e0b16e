package hybrid

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// Reservation is tokens taken for a request that may still be cancelled.
//
// A Local policy books future tokens exactly as local.Limiter.Reserve does:
// the Reservation is OK with a Delay to wait before acting. Hybrid and
// Strict policies cannot book the future, because the fleet grants leases,
// not time slots: their Reservation is OK only when the tokens were taken
// now (Delay zero); otherwise it holds nothing and Delay says when to try
// again.
//
// A Reservation is safe for concurrent use. Its methods accept a nil
// *Reservation, which holds nothing.
type Reservation struct {
	ok    bool
	delay time.Duration
	local local.Reservation
	k     *keyState // Hybrid: the lease to give back to on Cancel
	n     int64
	done  atomic.Bool // Cancel has run: a second gives nothing back
	d     Decision
	isD   bool
}

// refusedReservation is the Reservation that comes with an error: it
// holds nothing and cannot be acted on.
func refusedReservation(d Decision) *Reservation {
	return &Reservation{delay: Never, d: d, isD: true}
}

// OK reports whether the reservation holds its tokens.
func (r *Reservation) OK() bool { return r != nil && r.ok }

// Delay is how long to wait before acting on an OK reservation, or before
// trying again after one that is not OK (Never if it never can be).
func (r *Reservation) Delay() time.Duration {
	if r == nil {
		return Never
	}
	return r.delay
}

// Decision is the decision that took (or refused) a Hybrid or Strict
// reservation's tokens, with the fleet's remaining quota and reset; ok is
// false for a Local policy's reservation, which books time, not a
// decision.
func (r *Reservation) Decision() (d Decision, ok bool) {
	if r == nil {
		return refusedDecision(Never), false
	}
	return r.d, r.isD
}

// Cancel gives the tokens back, when that is still possible: a Local
// policy's reservation as local.Reservation.Cancel does, a Hybrid
// reservation to this node's lease. A Strict decision cannot be taken
// back. Cancel gives back at most once, however often it is called; a
// reservation of a cost of zero or less holds nothing and gives nothing.
func (r *Reservation) Cancel() {
	if !r.OK() || r.done.Load() || !r.done.CompareAndSwap(false, true) {
		return
	}
	switch {
	case r.k != nil:
		r.k.give(r.n)
	default:
		r.local.Cancel()
	}
}

// Reserve is shorthand for ReserveN(key, 1).
func (l *Limiter) Reserve(key string) (*Reservation, error) { return l.ReserveN(key, 1) }

// ReserveN takes n tokens for key, to be used after the Reservation's
// Delay, or given back with Cancel. On error the Reservation is not OK.
func (l *Limiter) ReserveN(key string, n int) (*Reservation, error) {
	p, k, err := l.lookup(key)
	if err != nil {
		return refusedReservation(l.errDecision(err)), err
	}
	if p.Mode == Local {
		r, err := p.local.ReserveNAt(key, l.clk.Now(), n, Never)
		if err = localErr(err); err != nil {
			return refusedReservation(l.errDecision(err)), err
		}
		return &Reservation{ok: r.OK(), delay: r.Delay(), local: r}, nil
	}
	return l.taken(k, n)
}

// TakeN takes n tokens for key if the policy admits them now, and nothing
// otherwise: unlike ReserveN it never books the future, and its
// Reservation always carries the Decision. Cancel gives the tokens back
// where that can be done: a Hybrid lease, and a Local token bucket if no
// other request has taken from the key since. A Strict decision, or a
// Local window or log, cannot be taken back. It is how httplimit applies
// several limits to one request, all or nothing. On error the
// Reservation is not OK.
func (l *Limiter) TakeN(key string, n int) (*Reservation, error) {
	p, k, err := l.lookup(key)
	if err != nil {
		return refusedReservation(l.errDecision(err)), err
	}
	if p.Mode != Local {
		return l.taken(k, n)
	}
	at := l.clk.Now()
	if p.Algorithm == local.TokenBucket {
		if r, err := p.local.ReserveNAt(key, at, n, 0); err == nil && r.OK() {
			res, err := p.local.AllowNAt(key, at, 0) // what is left, for the Decision
			return &Reservation{ok: true, local: r, d: fromLocal(res, false), isD: true}, localErr(err)
		}
	}
	res, err := p.local.AllowNAt(key, at, n)
	if err = localErr(err); err != nil {
		return refusedReservation(l.errDecision(err)), err
	}
	d := fromLocal(res, false)
	return &Reservation{ok: d.Allowed(), delay: d.RetryAfter(), d: d, isD: true}, nil
}

// lookup returns key's policy and, unless the policy's local.Limiter
// holds the key (see localPolicy), its state.
func (l *Limiter) lookup(key string) (*policy, *keyState, error) {
	if p := l.localPolicy(key); p != nil {
		if len(key) > l.cfg.MaxKeyLen {
			return nil, nil, ErrKeyTooLong
		}
		return p, nil, nil
	}
	k, err := l.state(key)
	if err != nil {
		return nil, nil, err
	}
	return k.pol, k, nil
}

// state returns key's state, resolving a key seen for the first time.
func (l *Limiter) state(key string) (*keyState, error) {
	for {
		if v, ok := l.keys.Load(key); ok {
			return v.(*keyState), nil
		}
		if _, err := l.allowNew(key, noTime, 0); err != nil {
			return nil, err
		}
	}
}

// taken decides n for a Hybrid or Strict key now. Only a Hybrid take of
// a positive cost from the lease can be given back.
func (l *Limiter) taken(k *keyState, n int) (*Reservation, error) {
	d, err := l.decide(k, noTime, int64(n))
	if err != nil {
		return refusedReservation(d), err
	}
	r := &Reservation{ok: d.Allowed(), delay: d.RetryAfter(), d: d, isD: true}
	if r.ok && k.pol.Mode == Hybrid && !d.Degraded() && n > 0 {
		r.k, r.n = k, int64(n)
	}
	return r, nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n requests for key are admitted, ctx is done, or it
// is clear they cannot be before ctx's deadline. It returns nil once they
// are admitted.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return err // as golang.org/x/time/rate: a done context takes nothing
		}
		if p := l.localPolicy(key); p != nil && len(key) <= l.cfg.MaxKeyLen {
			return localErr(p.local.WaitN(ctx, key, n))
		}
		v, ok := l.keys.Load(key)
		if ok && v.(*keyState).pol.Mode == Local {
			return localErr(v.(*keyState).pol.local.WaitN(ctx, key, n))
		}
		d, err := l.AllowNContext(ctx, key, n)
		if err != nil {
			return err
		}
		if d.Allowed() {
			return nil
		}
		wait := d.RetryAfter()
		if wait == Never {
			return fmt.Errorf("hybrid: WaitN(%q, %d): the cost exceeds the policy's limit %d", key, n, d.Limit())
		}
		if dl, ok := ctx.Deadline(); ok && l.clk.Now().Add(wait).After(dl) {
			return fmt.Errorf("hybrid: WaitN(%q, %d): would wait %v, past the context's deadline", key, n, wait)
		}
		t := l.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}
