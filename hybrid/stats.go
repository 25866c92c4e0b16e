package hybrid

import (
	"math"
	"sync/atomic"
	"time"
)

// Stats is what a Limiter has done since New, for metrics: requests by
// policy and outcome, its links to the fleet, and its sync rounds. Counts
// are of requests of cost 1; a request of cost n counts n.
//
// Counting costs the hot path nothing. A Hybrid key's admissions and
// refusals are read from its own counters at each sync that reaches the
// fleet, so they are up to an Interval behind, and further during an
// outage; a Strict key's are counted with each decision. Local policies'
// decisions are not counted: they are the local.Limiter's, and a shared
// counter would cost each of them a contended write.
type Stats struct {
	// Policies has one entry per Config.Policies, in order.
	Policies []PolicyStats
	// Fleets has Config.Syncer's link, then Config.Failover's if set.
	Fleets []FleetStats
	// Rounds is how many sync rounds have run (SyncOnce calls, and the
	// background loop's), and RoundErrors how many of them reached no
	// fleet.
	Rounds, RoundErrors uint64
	// RoundSeconds is the time the rounds took, in all, and RoundBuckets
	// how many took at most each bound, in seconds (cumulative, as a
	// Prometheus histogram counts).
	RoundSeconds float64
	RoundBuckets map[float64]uint64
	// RoundKeys is how many Hybrid keys the last round had to sync.
	RoundKeys int
	// EarlyRounds is how many early syncs ran: rounds for keys whose
	// lease ran low before their regular sync.
	EarlyRounds uint64
	// Leases is how many leases the fleet granted this node's Hybrid keys,
	// and LeasedTokens their sizes in all (a window algorithm's in
	// requests): LeasedTokens/Leases is the mean lease.
	Leases, LeasedTokens uint64
	// Forgotten is how many keys were forgotten: idle past
	// Config.IdleTimeout, evicted to stay within MaxKeys, or moved by a
	// change of policy.
	Forgotten uint64
	// TopRefused is the 10 keys refused most over the last one to two
	// minutes, most first: Hybrid keys whose lease was spent and Strict
	// keys the store refused (not those the FailMode refused in an
	// outage), as of the last sync round. It is counted in bounded
	// memory whatever the number of keys.
	TopRefused []RefusedKey
}

// PolicyStats counts one policy's requests.
type PolicyStats struct {
	Name string
	Mode Mode
	// Admitted and Refused count requests decided, Degraded those of the
	// Admitted that the policy's FailMode admitted without the fleet.
	Admitted, Refused, Degraded uint64
	// RefusedBy splits Refused by reason: "lease" (a Hybrid key's lease
	// was spent while the fleet had room at its last sync: a refusal
	// the fleet might have admitted), "limit" (the fleet was at its
	// limit: the store refused a Strict key, or a Hybrid key's last sync
	// found nothing left), "unreachable" (the FailMode refused, the
	// fleet out of reach), "key_error" (the FailMode refused a key the
	// fleet could not decide while it decided others: an error of the
	// key's own, or its part of the store down), "cost" (more than the
	// policy's capacity asked at once).
	RefusedBy map[string]uint64
	// Shadowed counts the requests a Shadow policy would have refused
	// and admitted (Policy.Shadow); they are not in Admitted nor Refused.
	Shadowed uint64
	// LoadFactor is what the policy's limit is scaled by
	// (Limiter.SetLoadFactor): 1 unless set.
	LoadFactor float64
}

// FleetStats is a link to one fleet.
type FleetStats struct {
	// Name is the Config field: "Syncer" or "Failover".
	Name string
	// Breaker is its circuit breaker's state: "closed", "open" or
	// "half-open".
	Breaker string
	// Calls counts the syncs and Strict decisions sent to it, Errors
	// those that did not reach it.
	Calls, Errors uint64
	// ErrorsBy splits Errors by cause: "timeout" (the call ran out of
	// time), "connect" (no connection could be made), "other".
	ErrorsBy map[string]uint64
}

// policyCounts are a policy's counters.
type policyCounts struct {
	admitted          atomic.Int64 // a Cancel gives back: what is admitted may go down
	refused, degraded atomic.Uint64
	shadow            atomic.Uint64 // refusals a Shadow policy admitted
	by                [len(refusalReasons)]atomic.Uint64
}

// refusal is why a request was refused (PolicyStats.RefusedBy).
type refusal int

const (
	byLease refusal = iota
	byLimit
	byUnreachable
	byKeyError
	byCost
)

// refusalReasons name the refusals, in refusal's order.
var refusalReasons = [...]string{"lease", "limit", "unreachable", "key_error", "cost"}

// countRefused counts n requests p refused for why, or, if p is a
// Shadow policy, admitted in their stead.
func (p *policy) countRefused(n uint64, why refusal) {
	if n == 0 {
		return
	}
	if p.Shadow {
		p.counts.shadow.Add(n)
		return
	}
	p.counts.refused.Add(n)
	p.counts.by[why].Add(n)
}

// roundBounds are the upper bounds of Stats.RoundBuckets, in seconds.
var roundBounds = [...]float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// roundCounts are the sync rounds' counters.
type roundCounts struct {
	n, errors atomic.Uint64
	nanos     atomic.Int64
	buckets   [len(roundBounds)]atomic.Uint64 // not cumulative
	keys      atomic.Int64

	early, leases, leased, forgotten atomic.Uint64
}

// countRound records a round of keys that took d.
func (l *Limiter) countRound(d time.Duration, keys int, err error) {
	r := &l.rounds
	r.n.Add(1)
	if err != nil {
		r.errors.Add(1)
	}
	r.nanos.Add(int64(d))
	r.keys.Store(int64(keys))
	for i, b := range roundBounds {
		if d.Seconds() <= b {
			r.buckets[i].Add(1)
			break
		}
	}
}

// countFailed records a request of cost n that the policy's FailMode
// decided. A Hybrid key's admissions are counted from its counters at
// its next sync; a Strict key's are counted here.
//
// A refusal is the key's own (key_error) if the key is failing while the
// fleet's breaker is closed: its part of the fleet answered it with an
// error, or is down (a Cluster master) while the rest answers. With the
// breaker open the whole fleet is out of reach (unreachable).
func (l *Limiter) countFailed(k *keyState, n int64, admitted bool) {
	if n <= 0 {
		return
	}
	c := k.policy().counts
	if !admitted {
		why := byUnreachable
		switch {
		case n > k.policy().capacity:
			why = byCost
		case k.failing.Load() && l.fleets[0].closed.Load():
			why = byKeyError
		}
		k.policy().countRefused(uint64(n), why)
		return
	}
	c.degraded.Add(uint64(n))
	if k.policy().Mode == Strict {
		c.admitted.Add(n)
	}
}

// Stats returns what the Limiter has done since New. It is safe to call
// at any time, and costs the requests nothing.
func (l *Limiter) Stats() Stats {
	var s Stats
	t := l.policies()
	for _, p := range t.list {
		by := make(map[string]uint64, len(refusalReasons))
		for i, r := range refusalReasons {
			by[r] = p.counts.by[i].Load()
		}
		s.Policies = append(s.Policies, PolicyStats{Name: p.Name, Mode: p.Mode, RefusedBy: by,
			Admitted: uint64(max(0, p.counts.admitted.Load())), Refused: p.counts.refused.Load(), Degraded: p.counts.degraded.Load(),
			Shadowed: p.counts.shadow.Load(), LoadFactor: t.loadFactor(p.Name)})
	}
	for _, f := range l.fleets {
		by := make(map[string]uint64, len(errorCauses))
		for i, c := range errorCauses {
			by[c] = f.causes[i].Load()
		}
		s.Fleets = append(s.Fleets, FleetStats{Name: f.name, Breaker: f.state(l.wall(l.now())),
			Calls: f.calls.Load(), Errors: f.errors.Load(), ErrorsBy: by})
	}
	r := &l.rounds
	s.Rounds, s.RoundErrors = r.n.Load(), r.errors.Load()
	s.RoundSeconds = time.Duration(r.nanos.Load()).Seconds()
	s.RoundKeys = int(r.keys.Load())
	s.EarlyRounds, s.Leases, s.LeasedTokens, s.Forgotten = r.early.Load(), r.leases.Load(), r.leased.Load(), r.forgotten.Load()
	s.RoundBuckets = make(map[float64]uint64, len(roundBounds))
	var sum uint64
	for i, b := range roundBounds {
		sum += r.buckets[i].Load()
		s.RoundBuckets[b] = sum
	}
	s.RoundBuckets[math.Inf(1)] = s.Rounds
	s.TopRefused = l.topRefused()
	return s
}
