package hybrid

import (
	"context"
	"errors"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// What a Strict key admits while the store cannot be reached (FailStatic
// or FailOpen) is counted in keyState.extra, as a Hybrid key's degraded
// admissions are. Once the store answers, the sync loop charges it to the
// key, or to the shards its decisions go to, so that the store's bucket
// does not start full on top of what the node admitted meanwhile (an
// outage's last second, then a fresh second from the store, would admit
// twice the limit). Like a Hybrid key's reports, only what falls in the
// key's current and previous Window is charged (roll and forgetStale,
// with reported[0] as what was charged): older admissions no longer count
// against the limit, and charging them would refuse requests for traffic
// long past. Every key's charge goes in one round trip.
//
// The sync loop is also what probes a Strict store's breaker: a Strict
// decision is not sent to a store whose breaker is open, and a Limiter
// with no Hybrid key has no lease sync to probe with, so the charges are
// the probe, or, with nothing owed, a decision of cost 0 on a Strict key
// (the empty key if none is tracked). A request never waits on a store
// whose breaker is open.

// owes reports whether a Strict key has admissions not yet charged.
// Sync loop only.
func (k *keyState) owes() bool { return k.extra.Load() != k.reported[0] }

// chargeStrict charges the Strict keys in owed with what they admitted
// without the store, and probes the store's breaker with probe (a Strict
// key, or nil) if no lease sync will. syncMu is held.
func (l *Limiter) chargeStrict(ctx context.Context, now int64, owed []*keyState, probe *keyState, synced bool) {
	if l.strict == nil {
		return
	}
	for _, k := range owed {
		k.forgetStale(0) // collect rolled its marks
	}
	f := l.fleets[0]
	strictP := l.policies().strictP
	if len(owed) == 0 && (synced || strictP == nil || f.closed.Load() && !l.unsure.Swap(false)) {
		return
	}
	if !f.allow(l.wall(now), true) {
		return
	}
	sent := l.wall(l.now())
	if len(owed) == 0 {
		key, limit := "", strictP.limit
		if probe != nil {
			key, limit = probe.key, probe.policy().limit
		}
		cctx, cancel := context.WithTimeout(ctx, l.cfg.StrictTimeout)
		_, err := l.strict.Allow(cctx, key, limit, 0)
		cancel()
		f.result(sent, err)
		l.strictLink(now, err, synced)
		return
	}
	s := &l.syncs
	s.charges, s.chargeOf = s.charges[:0], s.chargeOf[:0]
	s.spentAt = s.spentAt[:0]
	for i, k := range owed {
		s0 := k.extra.Load()
		s.spentAt = append(s.spentAt, s0)
		n := max(0, s0-k.reported[0])
		if set := k.shards.Load(); set != nil {
			// Decided on its shards, as far as this node knows (its
			// view may be due to be confirmed): the charge is shared
			// between them, as the decisions were. If the split has
			// ended, the merge carries what the shards spent over.
			per, rest := n/int64(len(set.keys)), n%int64(len(set.keys))
			for j, sh := range set.keys {
				c := per
				if int64(j) < rest {
					c++
				}
				s.charges = append(s.charges, store.StrictCharge{Key: k.key, Shard: sh, Limit: set.limit, N: c})
				s.chargeOf = append(s.chargeOf, i)
			}
			continue
		}
		s.charges = append(s.charges, store.StrictCharge{Key: k.key, Limit: k.policy().limit, N: n})
		s.chargeOf = append(s.chargeOf, i)
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
	errs, err := l.charger.Charge(cctx, s.charges)
	cancel()
	if err == nil && len(errs) != len(s.charges) {
		err = errors.New("hybrid: Config.Syncer's Charge answered the wrong number of charges")
	}
	f.result(sent, err)
	l.strictLink(now, err, synced)
	if err != nil {
		return // charged again next time: too much, at worst, never too little
	}
	// A key is charged when all of its charges (its shards') were.
	for j, e := range errs {
		if i := s.chargeOf[j]; e != nil && s.spentAt[i] >= 0 {
			l.keyFailed(owed[i], e) // charged again next time, until too old to count
			s.spentAt[i] = -1
		}
	}
	for i, k := range owed {
		if s.spentAt[i] >= 0 {
			k.reported[0] = s.spentAt[i]
		}
	}
}

// strictLink records in Health what a Strict call of the sync loop says
// of the fleet's reach, when no lease sync of the round did (synced):
// cut off when the store could not be reached, in touch when it
// answered. A node whose keys are all Strict was Healthy while its store
// was down and its decisions followed their FailMode
// (TestStrictCallerDeadlinesProbe).
func (l *Limiter) strictLink(now int64, err error, synced bool) {
	switch {
	case synced:
	case err == nil:
		l.reached(now)
	case errors.Is(err, fleet.ErrUnreachable):
		l.cutOff(now, 0, false)
	}
}
