package rules

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Verdict is the outcome of a request checked against its rules: the
// Decision of the rule that refused it, or, if every rule admitted it,
// of the one with the least left.
type Verdict struct {
	hybrid.Decision
	// Policy names the rule whose Decision it is ("rule", or
	// "rule/tier"); empty if no rule applied, when the request is
	// admitted.
	Policy string
}

// Limiter decides requests against a Set's rules with a hybrid.Limiter.
// It is safe for concurrent use; Apply replaces the rules while requests
// flow.
type Limiter struct {
	l       *hybrid.Limiter
	set     atomic.Pointer[Set]
	applyMu sync.Mutex
	applies atomic.Uint64 // rules swapped: a request that raced a swap is decided again
	version atomic.Uint64 // of the fleet's rules last applied (Follow, Publish)
	fleetMu sync.Mutex    // a version is checked and applied in one step
}

// New returns a Limiter deciding with l against s. The Set's policies
// are added to l's (hybrid.Limiter.SetPolicies), replacing any of the
// same names; l's others stay, and so do they at each Apply, which
// replaces only the policies of the rules it replaces. l may have been
// made with s.Policies(), or with policies of its own (a service that
// decides other requests by other means beside the rules).
func New(l *hybrid.Limiter, s *Set) (*Limiter, error) {
	if l == nil || s == nil {
		return nil, errors.New("rules: New needs a hybrid.Limiter and a Set")
	}
	r := &Limiter{l: l}
	if err := l.SetPolicies(merge(l.Config().Policies, nil, s.policies)); err != nil {
		return nil, fmt.Errorf("rules: %s: %w", s.file, err)
	}
	if err := s.setFactors(l); err != nil {
		return nil, err
	}
	r.set.Store(s)
	return r, nil
}

// merge is have without the policies named in drop or add, then add.
func merge(have, drop, add []hybrid.Policy) []hybrid.Policy {
	named := func(list []hybrid.Policy, name string) bool {
		return slices.ContainsFunc(list, func(q hybrid.Policy) bool { return q.Name == name })
	}
	var out []hybrid.Policy
	for _, p := range have {
		if !named(drop, p.Name) && !named(add, p.Name) {
			out = append(out, p)
		}
	}
	return append(out, add...)
}

// setFactors gives l the Set's load factors, one call per factor.
func (s *Set) setFactors(l *hybrid.Limiter) error {
	by := map[float64][]string{}
	for _, p := range s.policies {
		by[s.factors[p.Name]] = append(by[s.factors[p.Name]], p.Name)
	}
	for f, names := range by {
		if err := l.SetLoadFactor(f, names...); err != nil {
			return fmt.Errorf("rules: %s: %w", s.file, err)
		}
	}
	return nil
}

// Rules returns the Set in force.
func (r *Limiter) Rules() *Set { return r.set.Load() }

// Apply replaces the rules with s. The hybrid.Limiter's policies change
// as SetPolicies changes them: keys in use keep what they have spent. A
// request decided during the change is decided by the old rules or the
// new, never refused for a policy that is neither: the policies of both
// are in force while the rules are swapped. An error from the
// hybrid.Limiter (a policy it refuses, as a Strict rule without a Redis
// fleet) comes before the swap: nothing changes.
func (r *Limiter) Apply(s *Set) error {
	if s == nil {
		return errors.New("rules: Apply needs a Set")
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	old := r.set.Load()
	have := r.l.Config().Policies
	if err := r.l.SetPolicies(merge(have, nil, s.policies)); err != nil { // both sets' policies
		return fmt.Errorf("rules: %s: %w", s.file, err)
	}
	r.set.Store(s)
	// Counted between the swap and the removal of the old rules'
	// policies: a request that read the count before, and finds its
	// policy gone, is decided again by the new rules.
	r.applies.Add(1)
	if err := r.l.SetPolicies(merge(have, old.policies, s.policies)); err != nil { // a subset: valid
		return err
	}
	return s.setFactors(r.l)
}

// Allow is AllowN(req, 1).
func (r *Limiter) Allow(req Request) (Verdict, error) { return r.AllowN(req, 1) }

// AllowN checks n requests like req against every rule that applies to
// it, and takes them from all or none: a refusal by one rule gives back
// what the rules before it took (hybrid.Reservation.Cancel). Rules whose
// decisions cannot be given back (Strict, and Local windows and logs) are
// decided last, so that a refusal by another takes nothing from them. An
// error is the hybrid.Limiter's for a rule's key (too long, or too many
// keys), naming the rule; nothing is taken then.
func (r *Limiter) AllowN(req Request, n int) (Verdict, error) {
	for {
		applies := r.applies.Load()
		v, err := r.allowN(r.set.Load(), &req, n)
		if errors.Is(err, hybrid.ErrNoPolicy) && r.applies.Load() != applies {
			// Decided by rules an Apply has since replaced, whose
			// policies it has removed: nothing was taken.
			continue
		}
		return v, err
	}
}

func (r *Limiter) allowN(s *Set, req *Request, n int) (Verdict, error) {
	// The rules that cannot give back are asked first what they have
	// left: a request one of them would refuse is decided by that one
	// alone, so that it takes nothing from the others. (Without, nine
	// requests refused by a tenant's limit spent a shared window's ten
	// behind it, and locked every tenant out of the endpoint.)
	var early []*rule // taken while asked: not taken again
	var earlyRes []*hybrid.Reservation
	for _, ru := range s.rules {
		if !ru.last {
			continue
		}
		key, policy, ok := ru.keyOf(req)
		if !ok {
			continue
		}
		if d, err := r.l.AllowN(key, 0); err == nil && d.Remaining() < int64(n) {
			res, err := r.l.TakeN(key, n)
			if d := res.Decision(); err != nil || !d.Allowed() {
				if err != nil {
					err = fmt.Errorf("rules: rule %q: %w", policy, err)
				}
				return Verdict{Decision: d, Policy: policy}, err
			}
			early, earlyRes = append(early, ru), append(earlyRes, res) // admitted after all (shadow, or refilled)
		}
	}
	var held [4]*hybrid.Reservation
	taken := held[:0]
	var v Verdict
	matched := false
	for _, ru := range s.rules {
		key, policy, ok := ru.keyOf(req)
		if !ok {
			continue
		}
		var res *hybrid.Reservation
		var err error
		if i := slices.Index(early, ru); i >= 0 {
			res = earlyRes[i]
		} else {
			res, err = r.l.TakeN(key, n)
		}
		d := res.Decision()
		if err != nil || !d.Allowed() {
			for _, t := range taken {
				t.Cancel()
			}
			if err != nil {
				err = fmt.Errorf("rules: rule %q: %w", policy, err)
			}
			return Verdict{Decision: d, Policy: policy}, err
		}
		taken = append(taken, res)
		if !matched || d.Remaining() < v.Remaining() {
			v = Verdict{Decision: d, Policy: policy}
		}
		matched = true
	}
	return v, nil
}
