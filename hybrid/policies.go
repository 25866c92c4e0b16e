package hybrid

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
	"github.com/hybridlimit/hybridlimit/local"
)

// Policies change while the Limiter runs (SetPolicies, Invalidate). A
// decision reads the table in force once, without a lock; the sync loop
// moves each live key to the policy it now resolves to at its next round,
// so a change reaches every key within one Interval:
//
//   - A key whose policy is unchanged stays as it is.
//   - A key whose new policy has the same Mode and Algorithm (a new
//     limit, burst, window or fail mode; a tier change through Resolve)
//     keeps its state and its lease: only the policy it points to
//     changes. Its next sync tells the fleet the new limit, and the fleet
//     applies it to what the key has spent (the token bucket's spent
//     tokens, the window's count), so a change never hands out a fresh
//     bucket.
//   - A key whose Mode or Algorithm changes, or that no policy matches
//     any more, is handed back like an idle key (its next sync reports
//     what it spent and asks for nothing) and forgotten; its next request
//     starts it under the new policy, with the floor as its starter
//     credit rather than its part of the burst. Between the two it is
//     refused what its lease no longer covers, for about an early sync's
//     gap. A node's report series for a key is one at a time at the
//     fleet, so the new state must not sync before the old one has
//     handed back.
//
// A Local policy's keys live in its own local.Limiter: a Local policy
// whose Algorithm or Window changes gets a new one, and its keys start
// from full buckets; one whose Limit or Burst changes keeps its buckets,
// resized keeping what each key spent (local.Limiter.Resize); one that
// changes otherwise (Shadow, a fail mode) keeps them as they are.

// policyTable is the policies in force, replaced whole by SetPolicies.
type policyTable struct {
	gen        uint32             // from 1; a key resolved in another generation is resolved again
	list       []*policy          // longest Prefix first
	byName     map[string]*policy //
	given      []Policy           // as the caller gave them, for Config
	localFirst bool               // some policy is Local and keys are told by prefix (see localPolicy)
	strictP    *policy            // a Strict policy, whose limit probes the store; nil if none
	factors    map[string]float64 // load factors other than 1, by policy name (SetLoadFactor)
	resizes    []*policy          // policies whose local.Limiter their predecessor's limit sized (resize)
}

// resize gives the local.Limiter of each policy in t.resizes its
// policy's limit, keeping what each key spent: once t is in force, since
// a table refused must change nothing. The table's policies were checked,
// so that the limit is one a bucket holds.
func (t *policyTable) resize() {
	for _, p := range t.resizes {
		_ = p.local.Resize(p.Limit, p.Burst)
	}
	t.resizes = nil
}

// policies returns the table in force.
func (l *Limiter) policies() *policyTable { return l.table.Load() }

// newTable validates ps and builds the table that follows prev (nil at
// New). A policy equal to one of prev's of the same name is prev's, so
// that its keys, its local buckets and its counts stay as they are; a
// changed one keeps its counts.
func (l *Limiter) newTable(ps []Policy, field string, prev *policyTable, factors map[string]float64) (*policyTable, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("hybrid: %s is empty; give at least one Policy", field)
	}
	t := &policyTable{gen: 1, byName: make(map[string]*policy, len(ps)), given: append([]Policy(nil), ps...), factors: map[string]float64{}}
	if prev != nil {
		t.gen = prev.gen + 1
		if t.gen == 0 {
			t.gen = 1 // 0 asks a key to be resolved again (Invalidate)
		}
	}
	for i := range ps {
		p := ps[i]
		lim, err := checkPolicy(fmt.Sprintf("hybrid: %s[%d]", field, i), &p, l.cfg.Syncer)
		if err != nil {
			return nil, err
		}
		if _, dup := t.byName[p.Name]; dup {
			return nil, fmt.Errorf("hybrid: %s[%d]: Name %q is used twice", field, i, p.Name)
		}
		if f, ok := factors[p.Name]; ok {
			lim = scale(&p, f)
			t.factors[p.Name] = f
		}
		var was *policy
		if prev != nil {
			was = prev.byName[p.Name]
		}
		pol := was
		if was == nil || was.Policy != p {
			pol = makePolicy(p, lim, new(policyCounts))
			if was != nil {
				pol.counts = was.counts
			}
			switch {
			case was != nil && was.local != nil && (p.Mode == Local || p.OnUnreachable == FailStatic) &&
				was.Algorithm == p.Algorithm && was.Window == p.Window:
				// The same buckets: Shadow, Mode or a fail mode changed,
				// or the limit, which the buckets take keeping what they
				// spent, once the table is in force (resize).
				pol.local = was.local
				if was.Limit != p.Limit || was.Burst != p.Burst {
					t.resizes = append(t.resizes, pol)
				}
			case p.Mode == Local || p.OnUnreachable == FailStatic:
				pol.local, err = local.New(local.Config{
					Algorithm: p.Algorithm, Limit: p.Limit, Window: p.Window, Burst: p.Burst,
					MaxKeys: l.cfg.MaxKeys, MaxKeyLen: l.cfg.MaxKeyLen, Clock: l.cfg.Clock,
				})
				if err != nil {
					return nil, fmt.Errorf("hybrid: %s[%d] (%q): %w", field, i, p.Name, err)
				}
			}
		}
		t.byName[p.Name] = pol
		t.list = append(t.list, pol)
		t.localFirst = t.localFirst || p.Mode == Local && l.cfg.Resolve == nil
		if t.strictP == nil && p.Mode == Strict && l.strict != nil {
			t.strictP = pol
		}
	}
	sort.SliceStable(t.list, func(i, j int) bool { return len(t.list[i].Prefix) > len(t.list[j].Prefix) })
	return t, nil
}

// SetPolicies replaces the Limiter's policies with ps, validated as
// Config.Policies are: on an error, which wraps ErrInvalidConfig and
// names the policy and field at fault, nothing changes. New keys are
// resolved against ps at once; keys already in use move to the policy
// they now resolve to within one Interval (see the comment at the top of
// policies.go): a new limit applies to what a key has already spent in
// its window, so raising or lowering a limit never hands out a fresh
// bucket.
//
// The change is this node's. Give every node of the fleet the same
// policies: the fleet applies to a key the limit of the node that
// reported it last.
//
// SetPolicies is safe for concurrent use with decisions and with itself.
func (l *Limiter) SetPolicies(ps []Policy) error {
	l.tableMu.Lock()
	defer l.tableMu.Unlock()
	prev := l.policies()
	t, err := l.newTable(ps, "SetPolicies", prev, prev.factors)
	if err != nil {
		return cfgerr.Wrap(ErrInvalidConfig, err)
	}
	l.table.Store(t)
	t.resize()
	l.rehomeAll(t)
	return nil
}

// Invalidate asks that key's policy be resolved again, through
// Config.Resolve or the prefixes: a key whose tier changed (Resolve now
// names another policy) moves to it within one Interval, as after
// SetPolicies, keeping what it has spent. A key the Limiter does not
// hold is resolved when it is next seen anyway. It is safe for
// concurrent use.
func (l *Limiter) Invalidate(key string) {
	if k, ok := l.keys.Load(key); ok {
		k.gen.Store(0)
		l.wake(k)
	}
}

// resolve finds key's policy in t.
func (l *Limiter) resolve(t *policyTable, key string) *policy {
	if l.cfg.Resolve != nil {
		if name := l.cfg.Resolve(key); name != "" {
			return t.byName[name]
		}
	}
	for _, p := range t.list {
		if strings.HasPrefix(key, p.Prefix) {
			return p
		}
	}
	return nil
}

// rehome moves k, resolved in another generation of the policies than
// t's, to the policy it resolves to in t, at now. Sync loop only.
func (l *Limiter) rehome(k *keyState, t *policyTable, now int64) {
	k.gen.Store(t.gen)
	l.unpark(k) // what it rests on may have changed: see rests
	was := k.policy()
	p := l.resolve(t, k.key)
	if t.localFirst && p != nil && p.Mode == Local {
		// Decided by p's local.Limiter from now on (localPolicy): k is
		// no longer looked at but to hand its lease back.
		p = nil
	}
	p = l.called(k, t, p, was) // a limit given by a call (calllimit.go)
	switch {
	case p == was:
	case p != nil && p.Mode == was.Mode && p.limit.Algorithm == was.limit.Algorithm && p.Mode != Local:
		k.resetFallback() // its fail-static bucket is was's
		k.pol.Store(p)
		if ratio := min(float64(p.capacity)/float64(was.capacity), p.perSec/was.perSec); p.Mode == Hybrid && ratio < 1 {
			// The lease was sized for the higher limit: it keeps the
			// part the new limit would have leased, the rest goes back
			// to the fleet at the next sync, asked for at once, so that
			// a lower limit holds from the change. (Left whole until the
			// next regular sync, four nodes lowered from 1,000/s to
			// 400/s admitted up to 404 in the second after, beside an
			// ideal's 383.) A paced lease, whose release the pace
			// holds, is dropped whole.
			if p.paced {
				k.endPace(now)
				k.zero()
			} else {
				k.trim(ratio)
			}
			l.askEarly(k)
		}
	default:
		l.evict(k)
	}
}

// rehomeAll moves every key to its policy in t at once, rather than at
// its next round, so that a lower limit holds from the change (see
// rehome). It holds the sync loop back, never a decision: 100,000 keys
// took 36-53 ms, and decisions meanwhile 40-65 µs at the 99.9th
// percentile (BenchmarkSetPolicies).
func (l *Limiter) rehomeAll(t *policyTable) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	now := l.now()
	l.keys.Range(func(k *keyState) bool {
		if k.gen.Load() != t.gen {
			l.rehome(k, t, now)
		}
		return true
	})
}

// evict hands k back and forgets it: its policy is gone, or it now
// resolves to one of another Mode or Algorithm. A Hybrid key is handed
// back as an idle one is (see demand): forgotten once the fleet has its
// lease back and all it spent. Sync loop only.
func (l *Limiter) evict(k *keyState) {
	switch p := k.policy(); {
	case p.Mode == Hybrid:
		k.leaving = true
	case p.Mode == Local || l.charger == nil || !k.owes():
		l.forget(k)
	default:
		// A Strict key that owes the store a charge stays until it is
		// paid (chargeStrict); the next round evicts it.
		k.gen.Store(0)
	}
}
