package hybrid

import (
	"context"
	"errors"

	"github.com/hybridlimit/hybridlimit/global"
)

// StrictCharger counts in the fleet's store requests a node admitted for
// a Strict key without it. *global.Redis implements it.
type StrictCharger interface {
	// Charge counts n requests for key as admitted now, whatever the
	// store has left, but never beyond an empty bucket; a charge of 0
	// is a round trip that changes nothing.
	Charge(ctx context.Context, key string, limit global.Limit, n int64) error
}

var _ StrictCharger = (*global.Redis)(nil)

// What a Strict key admits while the store cannot be reached (FailStatic
// or FailOpen) is counted in keyState.extra, as a Hybrid key's degraded
// admissions are. Once the store answers, the sync loop charges it to the
// key, so that the store's bucket does not start full on top of what the
// node admitted meanwhile (an outage's last second, then a fresh second
// from the store, would admit twice the limit). Like a Hybrid key's
// reports, only what falls in the key's current and previous Window is
// charged (roll and forgetStale, with reported[0] as what was charged):
// older admissions no longer count against the limit, and charging them
// would refuse requests for traffic long past.
//
// The sync loop is also what probes a Strict store's breaker: a Strict
// decision is not sent to a store whose breaker is open, and a Limiter
// with no Hybrid key has no lease sync to probe with, so a charge (of 0
// if nothing is owed) is the probe.

// owes reports whether a Strict key has admissions not yet charged.
// Sync loop only.
func (k *keyState) owes() bool { return k.extra.Load() != k.reported[0] }

// chargeStrict charges the Strict keys in owed with what they admitted
// without the store, and probes the store's breaker with probe (a Strict
// key) if no lease sync will. syncMu is held.
func (l *Limiter) chargeStrict(ctx context.Context, now int64, owed []*keyState, probe *keyState, synced bool) {
	if l.charger == nil || len(l.fleets) == 0 {
		return
	}
	for _, k := range owed {
		k.forgetStale(0) // collect rolled its marks
	}
	f := l.fleets[0]
	if len(owed) == 0 && (synced || probe == nil || f.closed.Load()) {
		return
	}
	if !f.allow(l.wall(now), true) {
		return
	}
	if len(owed) == 0 {
		owed = append(owed, probe)
	}
	sent := l.wall(l.now())
	var err error
	for _, k := range owed {
		s0 := k.extra.Load()
		cctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
		err = l.charger.Charge(cctx, k.key, k.pol.limit, max(0, s0-k.reported[0]))
		cancel()
		switch {
		case err == nil:
			k.reported[0] = s0
		case errors.Is(err, global.ErrInvalid) || errors.Is(err, global.ErrCorrupt):
			l.keyFailed(k, err) // charged again next time, until too old to count
			err = nil
		default:
			f.result(sent, err)
			return // unreachable: the rest wait for the next sync
		}
	}
	f.result(sent, nil)
}
