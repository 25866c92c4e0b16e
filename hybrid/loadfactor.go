package hybrid

import (
	"fmt"
	"math"
	"slices"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
)

// SetLoadFactor scales the limits of the named policies (of every policy
// if none is named) by f, in (0, 1]: 1 is the limit as configured, 0.5
// half of it, for a backend that needs the traffic it takes cut while
// it recovers. A policy's Limit and Burst are multiplied by f (at least
// one request each); its keys move to the scaled limit within one
// Interval as after SetPolicies, keeping what they have spent, and a
// lower limit holds from then, the leases it makes too large handed back
// at once. The partition ladder's factor, in an outage, applies on top.
// The factor stays with each policy's name across SetPolicies until set
// again; Config reports the policies unscaled and Stats the factor.
//
// The factor is this node's. Set it on every node for the fleet to admit
// its share: the fleet applies to a key the limit the node that synced
// it last reported.
//
// An error, which wraps ErrInvalidConfig, names the factor or the policy
// at fault, and changes nothing. It is safe for concurrent use.
func (l *Limiter) SetLoadFactor(f float64, policies ...string) error {
	if math.IsNaN(f) || f <= 0 || f > 1 {
		return cfgerr.Wrap(ErrInvalidConfig, fmt.Errorf("hybrid: SetLoadFactor: the factor is %v; it must be more than 0 and at most 1", f))
	}
	l.tableMu.Lock()
	defer l.tableMu.Unlock()
	prev := l.policies()
	factors := make(map[string]float64, len(prev.given))
	for name, g := range prev.factors {
		factors[name] = g
	}
	for _, name := range policies {
		if _, ok := prev.byName[name]; !ok {
			return cfgerr.Wrap(ErrInvalidConfig, fmt.Errorf("hybrid: SetLoadFactor: no policy is named %q", name))
		}
	}
	for _, p := range prev.given {
		if len(policies) == 0 || slices.Contains(policies, p.Name) {
			factors[p.Name] = f
		}
	}
	for name, g := range factors {
		if g == 1 {
			delete(factors, name)
		}
	}
	t, err := l.newTable(prev.given, "SetLoadFactor", prev, factors)
	if err != nil {
		return cfgerr.Wrap(ErrInvalidConfig, err)
	}
	l.table.Store(t)
	t.resize()
	l.rehomeAll(t)
	return nil
}

// scale multiplies p's limit and burst, checked, by f, at least one
// each, and returns its fleet-wide limit.
func scale(p *Policy, f float64) fleet.Limit {
	p.Limit = max(1, int64(float64(p.Limit)*f))
	p.Burst = max(1, int64(float64(p.Burst)*f))
	return fleet.Limit{Algorithm: p.Algorithm, Limit: p.Limit, Window: p.Window, Burst: p.Burst}
}

// loadFactor is the factor SetLoadFactor set for policy name: 1 if none.
func (t *policyTable) loadFactor(name string) float64 {
	if f, ok := t.factors[name]; ok {
		return f
	}
	return 1
}
