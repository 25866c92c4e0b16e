package hybrid

import (
	"errors"
	"fmt"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// Limits given per call (AllowNLimit), for keys whose limits live in the
// caller's own store (one per customer) rather than in a policy each.
//
// A key given a limit by a call is held under a policy derived from the
// one it resolves to: the same in all but Limit and Burst (scaled by the
// policy's load factor), counted in its Stats. Its lease, its sync, its
// fail-static bucket and its Decision's limit all follow the derived
// policy, so the fleet applies the caller's limit to what the key spent.
// A new key starts under the call's limit at once. A call that changes
// a key's limit is a change of policy as SetPolicies makes one (see
// policies.go): the key is moved at the sync loop's next round, within
// one Interval, keeping what it has spent; until then it is decided by
// its previous limit. The decision path allocates only when the limit
// changes.

// ErrInvalidLimit is returned by AllowNLimit for a limit no policy could
// hold (below 1, a negative burst, a capacity over 2^31-1), or for a key
// whose policy cannot take a limit per call: a Local policy (its
// local.Limiter takes per-key limits through SetLimit) or one given by
// Rate.
var ErrInvalidLimit = errors.New("hybrid: invalid limit for the call")

// callLimit is what a call asked of a derived policy.
type callLimit struct {
	base         *policy // the policy the key resolves to
	limit, burst int64   // as the call gave them (burst 0: limit)
}

// AllowNLimit is AllowN for a key whose limit is given by the call: limit
// requests a Window of the key's policy, and for a TokenBucket policy
// burst its capacity (0 means limit); every other field is the policy's.
// A new key is decided by the call's limit at once; a key held under
// another limit moves to the call's within one Interval, keeping what it
// has spent, as after SetPolicies. Give a key the same limit on every
// node: the fleet applies the limit of the node that reported it last.
//
// The error wraps ErrInvalidLimit for a limit no policy could hold, or a
// key whose policy is Local or given by Rate; it is otherwise AllowN's.
// The Decision then refuses.
func (l *Limiter) AllowNLimit(key string, n int, limit, burst int64) (Decision, error) {
	return l.allowLimit(key, noTime, int64(n), callLimit{limit: limit, burst: burst})
}

// allowLimit is AllowNLimit at now, for the limit in c.
func (l *Limiter) allowLimit(key string, now, n int64, c callLimit) (Decision, error) {
	if p := l.localPolicy(key); p != nil {
		return l.errDecision(ErrInvalidLimit), fmt.Errorf("%w: policy %q is Local", ErrInvalidLimit, p.Name)
	}
	k, ok := l.keys.Load(key)
	if !ok {
		return l.allowNew(key, now, n, &c)
	}
	if have := k.policy().call; have == nil || have.limit != c.limit || have.burst != c.burst {
		if err := l.askLimit(k, c); err != nil {
			return l.errDecision(err), err
		}
	} else if k.gen.Load() == 0 {
		// The key is to be moved: not to a limit asked for before this
		// one, which the caller has gone back on.
		if w, ok := l.wanted.Load(key); ok && w.(callLimit) != c {
			l.wanted.CompareAndDelete(key, w)
		}
	}
	return l.decide(k, now, n)
}

// askLimit asks the sync loop to move k to the limit in c at its next
// round (rehome), after checking that it is one k's policy can hold.
func (l *Limiter) askLimit(k *keyState, c callLimit) error {
	if w, ok := l.wanted.Load(k.key); ok && w.(callLimit) == c && k.gen.Load() == 0 {
		return nil // asked already, and not yet moved
	}
	base := k.policy()
	if base.call != nil {
		base = base.call.base
	}
	if _, err := l.derive(l.policies(), base, c.limit, c.burst); err != nil {
		return err
	}
	l.wanted.Store(k.key, c)
	k.gen.Store(0) // resolved again at the next round, with the call's limit
	l.wake(k)
	return nil
}

// derive is base with the call's limit and burst, checked as New checks
// a policy, and scaled by base's load factor in t.
func (l *Limiter) derive(t *policyTable, base *policy, limit, burst int64) (*policy, error) {
	switch {
	case base.Mode == Local:
		return nil, fmt.Errorf("%w: policy %q is Local", ErrInvalidLimit, base.Name)
	case base.Rate != 0:
		return nil, fmt.Errorf("%w: policy %q is given by Rate; a limit per call counts requests per Window", ErrInvalidLimit, base.Name)
	}
	p := base.Policy
	p.Limit, p.Burst = limit, burst
	lim, err := checkFields("hybrid: AllowNLimit", &p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidLimit, err)
	}
	if f := t.loadFactor(p.Name); f != 1 {
		lim = scale(&p, f)
	}
	q := makePolicy(p, lim, base.counts)
	q.local, q.call = base.local, &callLimit{base: base, limit: limit, burst: burst}
	return q, nil
}

// called is p for a key whose last policy was was: derived from p with
// the limit a call asked for since (wanted), or else with was's, if was
// was derived. Sync loop only.
func (l *Limiter) called(k *keyState, t *policyTable, p, was *policy) *policy {
	c := was.call
	if w, ok := l.wanted.LoadAndDelete(k.key); ok {
		w := w.(callLimit)
		c = &w
	}
	if p == nil || c == nil {
		return p
	}
	q, err := l.derive(t, p, c.limit, c.burst)
	switch {
	case err != nil:
		return p // the key's new policy cannot take the call's limit: its own, until the next call
	case was.call != nil && was.call.base == p && q.Policy == was.Policy && q.limit == was.limit:
		// The same, compared whole: a load factor that leaves p as it
		// was (a Limit of 1 halved is 1) may still change q.
		return was
	}
	return q
}

// makePolicy is a policy ready for use, with p checked and lim its
// fleet-wide limit.
func makePolicy(p Policy, lim fleet.Limit, counts *policyCounts) *policy {
	pol := &policy{Policy: p, limit: lim, capacity: p.Limit, perSec: float64(p.Limit) / p.Window.Seconds(), counts: counts}
	pol.paced = p.Mode == Hybrid && lim.Algorithm == local.SlidingWindow
	if p.Algorithm == local.TokenBucket {
		pol.capacity = p.Burst
	}
	return pol
}
