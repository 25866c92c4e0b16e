package hybrid

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// What a key asks its fleet for at each sync: a forecast of the requests
// it will be offered, with headroom, for as long as the lease must last.

// headroom is how much more than its forecast a node asks to lease, so
// that ordinary jitter in its traffic does not run the lease dry before
// the next sync.
const headroom = 1.5

// forecast updates k's demand estimate: an exponentially weighted moving
// average of the requests offered (admitted or not) per second, with a
// time constant of two intervals.
func (l *Limiter) forecast(k *keyState, now int64, m mark) {
	first := k.spentSeen == 0 && k.refusedSeen == 0
	offered := float64(m.s0-k.spentSeen) + float64(m.refused-k.refusedSeen)
	k.policy().counts.admitted.Add(m.s0 - k.spentSeen)
	why := byLease // the fleet had room when the lease was granted
	if k.hasGrant.Load() && k.fleetRemaining.Load() <= 0 {
		why = byLimit
	}
	k.policy().countRefused(m.refused-k.refusedSeen, why)
	l.noteRefused(k.key, m.refused-k.refusedSeen)
	k.spentSeen, k.refusedSeen = m.s0, m.refused
	dt := now - k.forecastAt
	// A new key synced at the instant it was made (on a virtual clock;
	// on the wall clock some microseconds pass) still counts its first
	// request: its rate is at least that over a quarter interval.
	if dt <= 0 && k.hasGrant.Load() {
		return
	}
	k.forecastAt = now
	if offered > 0 && !(first && offered == 1) {
		// Traffic since the last forecast: the key was active at some
		// time up to now. At the first, a single request of cost one
		// is the one that made the key, active when it was made: a
		// key seen once is idle, and handed back and forgotten, at its
		// first sync if that comes an idle time later. Rounds too long
		// for every key reach a one-off key late, and dating its request
		// by the sync cost a second sync per key (12,000 one-off keys:
		// two passes over the table, 12,001 still held after 10 s on a
		// loaded CI).
		k.activeAt = now
	}
	// A sample spans at least the early-sync gap (earlyGap), the least
	// time between two syncs of a key, so that a new key's first one does
	// not read a rate from microseconds; past it, the average weighs each
	// sample by its span. A longer floor read a key that syncs early
	// often below its rate: clamped at a quarter interval, keys at their
	// limit with an interval beyond the window, which sync every eighth
	// of the window (see gapOf), read half their rate (interval 2 s on a
	// 1 s window, 8 nodes at twice the limit in the simulator: the fleet's
	// worst window 48% over the ideal); clamped at a quarter window, a new
	// key syncing every 10 ms as it spent its starter read a sixteenth,
	// and its first second admitted 1,000 less than the ideal, spent in
	// the next windows (worst window 13%; with the turn, turnOf in
	// global's scripts, and the average's time constant below, 3-6%).
	sample := max(offered, 0) * 1e9 / max(float64(dt), float64(l.earlyGap()))
	if !k.hasGrant.Load() {
		k.rate = max(k.rate, sample)
		return
	}
	k.rate += (1 - l.kept(k, dt)) * (sample - k.rate)
}

// quietUntil brings k's forecast to t, k offered nothing since its last
// forecast (see takeInbox): the average decays as a forecast at t with
// no request would have it. Sync loop only.
func (l *Limiter) quietUntil(k *keyState, t int64) {
	if dt := t - k.forecastAt; dt > 0 && k.hasGrant.Load() {
		k.rate *= l.kept(k, dt)
		k.forecastAt = t
	}
}

// kept is the weight a forecast keeps of its past over dt ns: its time
// constant is two Intervals, or two of k's windows when that is shorter.
// A key's traffic over a window is what its limit is about; following it
// over two 2 s intervals, a node at a 1 s window took seconds to ask for
// the traffic it was offered, and the bucket's first burst was spent late
// (simulator, skewed, 8 nodes: its first window 2,265 short of the
// ideal, its second 1,561 over it).
func (l *Limiter) kept(k *keyState, dt int64) float64 {
	return math.Exp(-float64(dt) / (2 * float64(min(l.cfg.Interval, k.policy().Window))))
}

// demand is what k asks to lease for the next interval; consumed is what
// it reports spent since the last sync.
func (l *Limiter) demand(k *keyState, now, consumed int64) int64 {
	k.capped = false
	k.idle = k.leaving || now-k.activeAt > l.idleAfter()
	if k.idle {
		return 0
	}
	h := l.horizon(k.policy())
	if k.hasGrant.Load() && k.fleetRemaining.Load() < k.policy().capacity/2 {
		// Near its limit a key asks for what a loop keeping time would:
		// its demand is its claim on the fleet's shares (gossip reads it
		// as a rate), and a node whose rounds run late or far apart
		// would claim more than its traffic and take the others' share
		// (TestGossipSkew beside busy loops: 7.7-13% refused against
		// 3.5-7% before leases were sized for lateness). Far from its
		// limit the fleet has room, and a starved node keeps its leases.
		h = min(l.cfg.Interval, k.policy().Window) + time.Duration(l.syncs.rtt)
	}
	d := max(ceil(k.rate*h.Seconds()*headroom), l.floor(k.policy(), int(k.nodes)))
	if !k.hasGrant.Load() && l.nodesHint.Load() > 1 {
		// A new key's first sync in a fleet: the other nodes may have
		// spent their starter credits (the floor while the fleet is not
		// known) and not reported them yet, which the fleet cannot see. Its first lease is its own part of the burst, less
		// what it has spent of it, so that the starters and the first
		// leases together hold at most the burst; its next sync, asked
		// for early if the lease runs low, asks for what it needs. (Two
		// nodes, a burst of 100: the first to sync was leased the 50 the
		// other's starter had already spent, and the key admitted 150.)
		d = min(d, max(l.floor(k.policy(), int(k.nodes)), l.starter(k.policy())-consumed))
	}
	if l.cfg.Shares == fleet.Equal {
		if c := l.entitled(k, now, consumed); d > c {
			d, k.capped = c, true
		}
	}
	return min(d, k.policy().capacity, maxAllowance)
}

// horizon is how long a lease granted now must last: until the grant
// after next is installed, one interval and a round trip away (what is
// spent during the next sync's round trip comes out of this lease), or
// more when rounds come further apart or later than the interval (see
// lateRound and lagged). An
// interval longer than the window is cut to the window: a lease for more
// than a window's traffic would be capped at the capacity anyway, and
// the node refills early instead of refusing the rest of the interval.
func (l *Limiter) horizon(p *policy) time.Duration {
	return min(max(l.cfg.Interval, time.Duration(l.syncs.pace.gap)), p.Window) + time.Duration(l.syncs.rtt+l.syncs.pace.lag)
}

// observeRTT folds one sync's round trip into the moving average; a
// slower round trip counts at once, a faster one over a few syncs, so
// that leases cover the round trips the fleet really has.
func (s *syncState) observeRTT(d int64) {
	if d > s.rtt {
		s.rtt = d
		return
	}
	s.rtt += (d - s.rtt) / 8
}

// lowWater is the allowance below which k asks for an early sync: a
// quarter of the lease, or what the node spends in a round trip and an
// early sync's least gap, whichever is more, so the refill lands before
// the lease runs dry.
func (l *Limiter) lowWater(k *keyState, lease int64) int64 {
	trip := float64(l.syncs.rtt+l.earlyGap()+l.syncs.pace.lag) / 1e9
	return min(lease, max(1, lease/4, ceil(k.rate*trip*headroom)))
}

// entitled is what an Equal share lets k lease now. The share is metered
// as a token bucket of 1/N of the policy's rate and capacity: leases take
// from it, what a lease left unspent comes back.
func (l *Limiter) entitled(k *keyState, now, consumed int64) int64 {
	n := l.nodesOr(int(k.nodes))
	capacity := max(1, float64(k.policy().capacity)/n)
	r := k.more()
	if r.shareAt == 0 {
		r.share = capacity
	} else {
		r.share += k.policy().perSec / n * float64(now-r.shareAt) / 1e9
		r.share += float64(max(0, k.lease-consumed))
	}
	r.share = min(r.share, capacity)
	r.shareAt = now
	return int64(r.share)
}

// quota is the fleet's quota for one interval.
func (l *Limiter) quota(p *policy) float64 { return p.perSec * l.cfg.Interval.Seconds() }

// nodesOr returns n, or the largest fleet seen if n is unknown.
func (l *Limiter) nodesOr(n int) float64 {
	if n > 0 {
		return float64(n)
	}
	return l.fleetSize()
}

// floor is the least an active key asks for, and a new key's starter
// credit.
func (l *Limiter) floor(p *policy, nodes int) int64 {
	return min(max(1, ceil(minShare*l.quota(p)/l.nodesOr(nodes))), p.capacity)
}

// ceil rounds x up to a whole number of tokens, ignoring the last few
// bits of floating-point error so that 400.00000000000006 is 400.
func ceil(x float64) int64 {
	if x >= maxAllowance {
		return maxAllowance
	}
	return int64(math.Ceil(x - 1e-9*max(1, x)))
}
