package hybrid

import (
	"math"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// Keys that rest: a key far from its limit whose lease covers its
// traffic skips the regular rounds, so that the fleet's work follows the
// keys that need it, not every key every interval.

// restAfter is the lease TTL, in intervals, past which a grant lets a
// key rest: the Redis store grants two intervals, or the node's Hold.
const restAfter = 2

// restless keeps the keys of batch that this regular round must sync;
// the others rest (see rests). Sync loop only.
//
// A round that would sync no key still syncs the resting key synced
// longest ago, so that a fleet gone away shows in Health within an
// interval, and resting keys take turns to be heard.
func (l *Limiter) restless(batch []*keyState, now int64) []*keyState {
	out := batch[:0]
	var oldest *keyState
	for _, k := range batch {
		if !l.rests(k, now) {
			out = append(out, k)
		} else if oldest == nil || k.lastSync < oldest.lastSync {
			oldest = k
		}
	}
	if len(out) == 0 && oldest != nil {
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
// go idle (an idle key syncs to hand its lease back). Keys split into
// stripes or lease shards, paced, or handing over from shards, sync
// every round. Sync loop only.
func (l *Limiter) rests(k *keyState, now int64) bool {
	iv := int64(l.cfg.Interval)
	if !k.hasGrant.Load() || k.expires-now <= 2*iv+iv/5+l.syncs.rtt || k.failing.Load() || k.leaving ||
		k.lshards != nil || k.stripes.Load() != nil || k.policy().paced || k.handover.pending ||
		k.refused.Load() != k.refusedSeen || now-k.activeAt > l.idleAfter()-3*iv ||
		k.fleetRemaining.Load() < k.policy().capacity/2 {
		return false
	}
	need := ceil(k.rate * float64(2*iv+iv/5+l.syncs.rtt) / 1e9 * headroom)
	if allowanceOf(k.word.Load()) < k.low.Load()+need {
		return false
	}
	m := mark{refused: k.refused.Load()}
	m.s0, m.raw = k.markSpent()
	l.forecast(k, now, m)
	k.roll(now, m.s0)
	return true
}

// noteWeight keeps g's weight for k's fail-static share (see share). A
// lease to rest on says the key is far from its limit, and its weight,
// from whoever was active when it was granted, says little of k's
// traffic by the time the fleet may be lost: cut off, k then takes an
// equal part of the fleet the node knows. (Kept, a node that was alone
// on the key at its grant took the whole limit on the ladder: a Cluster
// master killed under a fleet of 3, its keys admitted 172 a second on
// half shares of 200, where 100 was due; TestMasterDownOnCluster.)
func (l *Limiter) noteWeight(k *keyState, g *fleet.Grant) {
	if g.TTL > restAfter*l.cfg.Interval {
		k.weightBits.Store(0)
		return
	}
	k.weightBits.Store(math.Float64bits(g.Weight))
}
