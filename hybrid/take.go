package hybrid

import (
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/local"
)

// Reservation is tokens taken now for a request that may still be called
// off, as when one request must pass several limits: all of them or none.
// TakeN makes one.
//
// A Reservation is safe for concurrent use. Its methods accept a nil
// *Reservation, which holds nothing.
type Reservation struct {
	d     Decision
	local local.Reservation // a Local token bucket's take, to cancel
	k     *keyState         // Hybrid: the lease to give back to on Cancel
	n     int64
	done  atomic.Bool // Cancel has run: a second gives nothing back
}

// refusedReservation is the Reservation that comes with an error: it
// holds nothing.
func refusedReservation(d Decision) *Reservation { return &Reservation{d: d} }

// Decision is the decision that took (or refused) the tokens. Its Allowed
// says whether the Reservation holds them.
func (r *Reservation) Decision() Decision {
	if r == nil {
		return refusedDecision(local.Never)
	}
	return r.d
}

// Cancel gives the tokens back, when that is still possible: to this
// node's lease for a Hybrid policy, to a Local token bucket if no other
// request has taken from the key since. A Strict decision, or a Local
// window or log, cannot be taken back. Cancel gives back at most once,
// however often it is called; a reservation of a cost of zero or less
// holds nothing and gives nothing.
func (r *Reservation) Cancel() {
	if r == nil || !r.d.Allowed() || r.done.Load() || !r.done.CompareAndSwap(false, true) {
		return
	}
	switch {
	case r.k != nil:
		r.k.give(r.n)
	default:
		r.local.Cancel()
	}
}

// TakeN takes n tokens for key if the policy admits them now, and nothing
// otherwise, as AllowN does, and returns them as a Reservation that can
// still give them back (see Reservation.Cancel). It is how httplimit
// applies several limits to one request, all or nothing. An error is
// AllowN's, with a Reservation that holds nothing.
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
			d, err := p.local.AllowNAt(key, at, 0) // what is left, for the Decision
			return &Reservation{d: d, local: r}, localErr(err)
		}
	}
	d, err := p.local.AllowNAt(key, at, n)
	if err = localErr(err); err != nil {
		return refusedReservation(l.errDecision(err)), err
	}
	// A window or log take cannot be undone: the zero local.Reservation
	// cancels nothing.
	return &Reservation{d: shadowed(p, d, int64(n))}, nil
}

// taken decides n for a Hybrid or Strict key now. Only a Hybrid take of
// a positive cost from the lease can be given back.
func (l *Limiter) taken(k *keyState, n int) (*Reservation, error) {
	d, err := l.decide(k, noTime, int64(n))
	if err != nil {
		return refusedReservation(d), err
	}
	r := &Reservation{d: d}
	if d.Allowed() && k.policy().Mode == Hybrid && !d.Degraded() && n > 0 {
		r.k, r.n = k, int64(n)
	}
	return r, nil
}
