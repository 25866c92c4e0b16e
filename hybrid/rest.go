package hybrid

import "context"

// Keys that rest: a key far from its limit whose lease covers its
// traffic skips the regular rounds, so that the fleet's work follows the
// keys that need it, not every key every interval.

// restSyncs is how many syncs a key has had before it may rest: its
// first grants come while the fleet's other nodes are still joining it,
// and weigh this node as if it were alone (cut off, a node falls back
// on its last weight: a Cluster master killed under a fleet of 3 whose
// keys rested on their first grants admitted 172 a second on half
// shares of 200, where 100 was due).
const restSyncs = 3

// restless keeps the keys of batch that this regular round must sync;
// the others rest (see rests). Sync loop only.
//
// Each round still syncs the resting key synced longest ago, so that a
// fleet gone away shows in Health within an interval, resting keys take
// turns to be heard, and a round is never made of keys cut off alone
// (a Cluster master down): with none of them answered, the whole round
// would count as an outage of the fleet. While the last round reached
// no fleet, no key rests. The result is kept apart from batch, which
// syncOnce syncs whole when the result reached no fleet.
func (l *Limiter) restless(batch []*keyState, now int64) []*keyState {
	if l.degraded.Load() {
		return batch // the last round reached no fleet: every key, as before resting
	}
	out := l.syncs.awake[:0]
	defer func() { l.syncs.awake = out[:0] }()
	var oldest *keyState
	for _, k := range batch {
		if !l.rests(k, now) {
			out = append(out, k)
		} else if oldest == nil || k.lastSync < oldest.lastSync || k.lastSync == oldest.lastSync && k.key < oldest.key {
			oldest = k // ties by key: the table's order is random, and the simulator must repeat
		}
	}
	if oldest != nil {
		out = append(out, oldest)
	}
	return out
}

// rests reports whether k may skip the regular round at now, and if so
// brings its forecast and counts up to date as a sync would. The fleet
// lets a key rest by granting its lease for longer than two intervals
// (fleet.Request.Hold, at most the IdleTimeout): Redis does so while
// the key's bucket keeps three quarters of its burst after the grant.
// k rests while that lease stands past the round after next with a
// round trip to spare, covers what k's forecast spends until then above
// its low-water mark (below it, k asks for an early sync as any key
// does), the fleet had half the key's capacity left at the last grant,
// nothing was refused since the last sync, and k is not about to
// go idle (an idle key syncs to hand its lease back), after its first
// restSyncs syncs. Keys split into
// stripes or lease shards, paced, or handing over from shards, sync
// every round. Sync loop only.
func (l *Limiter) rests(k *keyState, now int64) bool {
	iv := int64(l.cfg.Interval)
	margin := 2*iv + iv/5 + l.syncs.rtt + l.syncs.pace.lag // the round after next, however late the loop runs
	if !k.hasGrant.Load() || k.syncs < restSyncs || k.expires-now <= margin || k.failing.Load() || k.leaving ||
		k.lshards != nil || k.stripes.Load() != nil || k.policy().paced || k.handover.pending ||
		k.refused.Load() != k.refusedSeen || now-k.activeAt > l.idleAfter()-3*iv ||
		k.fleetRemaining.Load() < k.policy().capacity/2 {
		return false
	}
	need := ceil(k.rate * float64(margin) / 1e9 * headroom)
	if allowanceOf(k.word.Load()) < k.low.Load()+need {
		return false
	}
	m := mark{refused: k.refused.Load()}
	m.s0, m.raw = k.markSpent()
	l.forecast(k, now, m)
	k.roll(now, m.s0)
	return true
}

// syncAwake syncs batch, the keys of all that do not rest. If that
// reached no fleet, the keys may be only those whose part of the fleet
// is down (a Cluster master): the round is made whole at once, as a
// round without resting keys, which tells a part down from the fleet
// gone. It returns how many keys were synced. Sync loop only.
func (l *Limiter) syncAwake(ctx context.Context, now int64, all, batch []*keyState) (int, error) {
	err := l.syncRound(ctx, now, batch, regular, l.cfg.Interval)
	if len(batch) < len(all) && l.degraded.Load() {
		return len(all), l.syncRound(ctx, l.now(), all, regular, l.cfg.Interval)
	}
	return len(batch), err
}
