package gossip

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// Granting: a node's Sync, answered from the table.

// syncAll answers a whole request: a grant per key, and how long this
// node has been on a split's minority side.
func (t *table) syncAll(req *fleet.Request, now instant, split time.Duration) *fleet.Response {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys)), Partitioned: split}
	for i := range req.Keys {
		resp.Grants[i] = t.sync(&req.Keys[i], req.Interval, req.Shares, now, split > 0)
	}
	return resp
}

// sync records this node's use of one key and grants its next lease.
// interval is the caller's sync interval; minority, whether this node is
// on a split's minority side (no slack then).
func (t *table) sync(u *fleet.Usage, interval time.Duration, shares fleet.Shares, now instant, minority bool) fleet.Grant {
	lim := u.Limit
	if err := lim.Validate(); err != nil {
		return fleet.Grant{Err: fmt.Errorf("%w: %v", fleet.ErrInvalid, err)}
	}
	k := t.keyFor(xxh3.HashString(u.Key), true, now)
	ms := uint64(lim.Window / time.Millisecond)
	burst := lim.Burst
	if lim.Algorithm != local.TokenBucket || burst == 0 {
		burst = lim.Limit
	}
	B := float64(burst)
	perNs := float64(lim.Limit) / float64(lim.Window)
	ep, frac := epochOf(now.wall, ms)

	own := &k.own
	if own.windowMs != ms {
		*own = entry{hash: k.hash, windowMs: ms, epoch: ep, stamp: own.stamp}
	}
	own.roll(ep)
	l := k.local
	first := l == nil || l.limit != lim // this node's first sync of the key: its forecast is a guess
	if first {
		l = &use{limit: lim, levelAt: now.mono, meterAt: now.mono, meter: -1}
		k.local = l
		if lim.Algorithm == local.TokenBucket {
			l.level = B - t.used(k, ms, ep, frac)
		}
	}
	l.usedAt = now.mono

	// What was spent from the last lease was spent in the window it was
	// granted in: a sliding window's lease lapses at the window's edge.
	// The rest (spent past the lease, while the fleet was unreachable)
	// is counted now.
	consumed := uint64(max(u.Consumed, 0))
	if fromLease := min(consumed, l.lease); l.leaseEpoch+1 == ep && fromLease > 0 {
		own.prev += fromLease
		consumed -= fromLease
	}
	own.cur += consumed
	spent := float64(max(u.Consumed, 0))

	demand := max(u.Demand, 0)
	rate := uint64(0)
	if demand > 0 {
		rate = uint64(math.Ceil(float64(demand) / max(interval.Seconds(), 1e-3)))
	}
	// The node weighs itself at the higher of its forecast now and the
	// one it last sent, if within two intervals: its peers' forecasts
	// in its view are as old as their last syncs, and those it sent are
	// what they weigh it by. Weighed at a forecast fallen since, a fleet
	// idle between bursts saw each node light beside its peers' older,
	// higher forecasts, the weights summing to about half, and the next
	// burst found each node's meter at its weight's part of the burst
	// (simulator, bursts at a 2 s interval on a 1 s window, 8 nodes, five
	// seeds: false rejection 5.6-7.5% -> 3.7-5.7%; 16 nodes 4.6-6.4% ->
	// 1.5-2.2%; at 100 ms unchanged within 0.01 points).
	wrate := rate
	if !first && now.mono-l.sentAt <= int64(2*interval) {
		wrate = max(rate, own.demand)
	}
	w, nodes, light := t.weight(k, wrate, shares, interval, now)
	size := max(nodes, len(t.peers)+1) // every peer known, for a key not all have synced yet

	var lease, remaining, paced int64
	var pacedFor time.Duration
	var used float64
	var resetAfter time.Duration
	others := 0.0
	for i := range k.peers {
		c := &k.peers[i]
		if leaseStands(c, now) && (lim.Algorithm == local.TokenBucket || c.e.epoch == ep) {
			// No live peer holds more than the whole policy.
			others += min(float64(c.e.reserved), float64(max(burst, lim.Limit)))
		}
	}
	switch lim.Algorithm {
	case local.TokenBucket:
		// The last lease, while it stands, left the bucket when it was
		// granted, as the Redis scripts take it: what refilled since
		// fills the bucket beside it, and what of it went unspent comes
		// back. Refilled first and charged after, a bucket near full
		// lost the refill the node's spending had made room for: one
		// node alone admitted 69-82 fewer than the ideal in its first
		// second (burst 500), all at the first time its lease was cut.
		prev := 0.0
		if !first && now.mono-l.levelAt <= int64(2*interval) {
			prev = float64(l.lease)
		}
		dt := float64(now.mono - l.levelAt)
		l.level = settleBucket(l.level, prev, perNs*dt, spent, B)
		l.levelAt = now.mono
		// This node's own meter: its weight's part of the rate and the
		// burst. It is what bounds a node that cannot hear its peers.
		capacity := w * B
		if l.meter < 0 {
			l.meter = capacity
		} else {
			l.meter = settleBucket(l.meter, prev, w*perNs*float64(now.mono-l.meterAt), spent, capacity)
		}
		l.meterAt = now.mono
		free := l.level - others
		// Each node takes only its weight's part of what is free: the
		// nodes sync one after another from views a round apart, and at
		// the limit a node refused last round holds no lease, so every
		// node saw the whole free budget at once and took what it asked
		// (5 nodes at twice the limit: 300 leased against 152 free
		// every other round, and a window after a burst up to 14% over
		// the limit). The meter alone does not bound this: it banks up
		// to its part of the burst. What the weights leave is held
		// back once, about one interval's refill (docs/gossip.md). A
		// sliding window needs no such cut: its meter is its weight's
		// part of the window's count, so the fleet's sum is the limit.
		lease = clampLease(demand, l.meter, w*free)
		if light && !minority && free >= B/2 {
			lease = max(lease, min(slack(demand, free, size, lim, interval), int64(max(l.meter, 0))))
		}
		remaining = saturate(free - float64(lease))
		used = B - l.level
		resetAfter = time.Duration(saturate((B - l.level) / perNs))
	case local.SlidingWindow:
		used = t.used(k, ms, ep, frac)
		free := float64(lim.Limit) - used - others
		meter := w*float64(lim.Limit) - own.estimate(ep, frac)
		lease = clampLease(demand, meter, free)
		if light && !minority && free >= float64(lim.Limit)/2 {
			lease = max(lease, min(slack(demand, free, size, lim, interval), int64(max(meter, 0))))
		}
		// Not past two intervals a window: each node's view of the
		// others' counts is a round or more old, and a pace that
		// spans most of a window leases against it for that long (1 s
		// syncs on a 1 s window over real memberlist: 73% of the ideal
		// admitted, from 84%).
		if u.Paced && !minority && 2*interval <= lim.Window {
			paced, pacedFor = pace(lease, demand, frac, interval, lim.Window, free, meter, func(f float64) (float64, float64) {
				return float64(lim.Limit) - t.used(k, ms, ep, f) - others, w*float64(lim.Limit) - own.estimate(ep, f)
			})
		}
		remaining = saturate(free - float64(lease+paced))
		// A count in the current window lasts until the end of the next;
		// a lease will be counted in the current window when spent. The
		// edge is to the nanosecond, not from frac's whole milliseconds,
		// which put it up to a millisecond late: a paced lease, spent up
		// to the edge, spent that past it (a token a window at 500/s).
		span := uint64(ms) * uint64(time.Millisecond)
		edge := time.Duration(span - uint64(max(now.wall, 0))%span)
		switch {
		case lease > 0 || t.curCount(k, ms, ep) > 0:
			resetAfter = edge + lim.Window
		case used > 0:
			resetAfter = edge
		}
	}

	l.lease, l.leaseEpoch = uint64(lease+paced), ep
	ttl := 2 * interval
	// The stamp: this node's wall time, past the last one so that peers
	// take every change as news. Raised past the clock (more than one
	// change within a millisecond), it may fall in the next window; the
	// entry's counts move with it, so its window is its stamp's.
	own.stamp = max(own.stamp+1, now.ms())
	own.roll(own.stamp / ms)
	if !k.dirty {
		k.dirty = true
		t.changed = append(t.changed, k)
	}
	own.reserved = uint64(lease + paced)
	own.ttlMs = uint64(min(ttl.Milliseconds(), maxTTLms))
	own.demand, l.sentAt = min(rate, maxCount), now.mono
	own.weight = uint16(math.Round(min(max(w, 0), 1) * weightScale))
	return fleet.Grant{
		Lease:      lease,
		TTL:        ttl,
		Used:       saturate(math.Ceil(used - 1e-9)),
		Remaining:  remaining,
		Nodes:      nodes,
		Weight:     w,
		ResetAfter: max(0, resetAfter),
		Paced:      paced,
		PacedFor:   pacedFor,
	}
}

// settleBucket is a bucket at level, beside which a lease of prev was
// out, after refill and the spending of spent, capped at most: the lease
// is taken out before the refill and what it left unspent put back
// after, so that the refill is not lost to the cap while the lease was
// being spent.
func settleBucket(level, prev, refill, spent, most float64) float64 {
	t := min(most, level-prev+refill)
	if spent < prev {
		return min(most, t+prev-spent)
	}
	return t - (spent - prev)
}

// pace is a sliding window's paced part beside a lease of lease (see
// fleet.Grant.Paced), as the Redis scripts pace it: what the previous
// window's weight frees until two intervals on, never past the window's
// edge, released no faster than it frees. free and meter are the fleet's
// free budget and this node's meter now (frac into the window), and at
// tells them at a later point of the window: both grow linearly as the
// window slides, so a release that meets them at both ends of the span
// stays within them throughout. It returns the paced part and its span.
func pace(lease, demand int64, frac float64, interval, window time.Duration, free, meter float64, at func(frac float64) (free, meter float64)) (int64, time.Duration) {
	to := min(1, frac+2*interval.Seconds()/window.Seconds())
	if to <= frac {
		return 0, 0
	}
	free1, meter1 := at(to)
	g := clampLease(demand, meter1, free1)
	if g <= lease {
		return 0, 0
	}
	// The span ends where both bounds have grown to the whole grant.
	end := frac
	for _, b := range [][2]float64{{free, free1}, {meter, meter1}} {
		if b[0] < float64(g) && b[1] > b[0] {
			end = max(end, frac+(float64(g)-b[0])*(to-frac)/(b[1]-b[0]))
		}
	}
	span := time.Duration(math.Ceil((min(end, to) - frac) * float64(window)))
	return g - lease, max(time.Microsecond, span)
}

// clampLease is the lease: the demand, if the node's share and the
// fleet's free budget both allow it.
func clampLease(demand int64, share, free float64) int64 {
	if demand <= 0 {
		return 0
	}
	g := math.Floor(min(float64(demand), share, free))
	if g < 1 {
		return 0
	}
	return int64(g)
}

// slack is the least a node that demands anything leases while the key
// is light (see weight), as the Redis scripts lease (slackOf, which
// lend from what is free beyond a quarter of the capacity): half its
// equal part of what is free, up to what the limit refills in two
// intervals, so that a burst finds room. Leased to its forecast alone, a
// node whose traffic comes in bursts refused what the fleet had room
// for: in the simulator (8 nodes, 100 ms) 0.93% of requests on keys none
// of which reached 30% of its limit (zipf; 0.015% now), 1.3% (hotkey;
// 0.016% now), 2.1% (bursts; 0.093% now), and over real memberlist
// 66-73% of bursts of 60 that an ideal limiter admits all of
// (TestGossipUnderLimit in hybrid; 0 now).
//
// Half, not the whole part: a node's slack is out of everyone else's
// reach, and when a burst comes the bursting node's cut (w*free) is what
// the others' slack leaves (bursts at the limit: 3.0% refused with the
// whole part, 2.3% with half, 2.1% with none). nodes counts every peer
// the table knows (the dead and departed until forgotten, so at least
// the members), not only those heard from on the key: on a cold start
// every node hears no one and would take all that is free. The caller
// gives no slack on a split's minority side or with less than half the
// key free, and never past the node's meter, which bounds a node that
// cannot hear its peers. The fleet's slack leases together
// hold at most what is free, as each node sees it. Only while leases are
// short beside the window (interval at most an eighth of it), as in the
// scripts. docs/gossip.md has the figures.
func slack(demand int64, free float64, nodes int, lim fleet.Limit, interval time.Duration) int64 {
	if demand <= 0 || free < 1 || nodes < 1 || 8*interval > lim.Window {
		return 0
	}
	most := math.Ceil(float64(lim.Limit) * 2 * float64(interval) / float64(lim.Window))
	return int64(math.Floor(min(free/float64(2*nodes), most)))
}

// used is the fleet's sliding-window count for k over the window ending
// now, from every node's entry with the same window.
func (t *table) used(k *key, ms, ep uint64, frac float64) float64 {
	n := 0.0
	if k.own.windowMs == ms {
		n += k.own.estimate(ep, frac)
	}
	for i := range k.peers {
		if e := &k.peers[i].e; e.windowMs == ms {
			n += e.estimate(ep, frac)
		}
	}
	return n
}

// curCount is the fleet's count in window ep.
func (t *table) curCount(k *key, ms, ep uint64) uint64 {
	n := k.own.countAt(ep)
	for i := range k.peers {
		if e := &k.peers[i].e; e.windowMs == ms {
			n += e.countAt(ep)
		}
	}
	return n
}

// weight is this node's share of k's budget, the number of nodes the
// budget is split between, and whether the key is light: every peer on
// it heard from within two intervals, their forecasts together at most
// half its rate. Silent peers keep the weight they last
// reported; live nodes split the rest: equally, or by demand, max-min
// fair (a node that wants less than an even split gets what it wants, and
// the others share what it leaves; if all want less than there is, each
// gets a part in proportion to its demand).
func (t *table) weight(k *key, rate uint64, shares fleet.Shares, interval time.Duration, now instant) (w float64, n int, light bool) {
	demands := append(t.scratch[:0], float64(rate))
	reserved, whole, held := 0.0, true, 0.0
	n = 1
	for i := 0; i < len(k.peers); i++ {
		// A peer's variants (an incarnation before its restart, a
		// window before its policy changed) lie together: only its
		// latest stamp counts here. Each counted, a peer's restart or
		// new window counted it twice for as long as the old entry
		// stayed live (3 s): a heavy node's weight fell from 0.53 to
		// 0.07 meanwhile. By stamp, not incarnation: a forged higher
		// incarnation with a clean slate would hide the peer's own
		// updates for good (TestForgedPackets); a stamp is bounded to
		// a window ahead (see Trust model).
		c := &k.peers[i]
		for i+1 < len(k.peers) && k.peers[i+1].p == c.p {
			i++
			if d := &k.peers[i]; d.e.stamp > c.e.stamp {
				c = d
			}
		}
		switch t.standingOf(c, now) {
		case live:
			demands = append(demands, float64(c.e.demand))
			if c.p.alive && !c.p.left {
				// A member's: an entry under a name memberlist does not
				// know (forged, or from a node gone) holds nothing back.
				held += float64(c.e.weight) / weightScale
			}
			n++
			// A view of a peer older than two intervals may miss what
			// it has leased and spent since: a fleet too large for every
			// update to reach every node soon (16 nodes: the simulator's
			// bursts went from 21% to 30% over the limit with slack).
			whole = whole && now.mono-c.recvAt <= int64(6*interval)
		case silent:
			reserved += float64(c.e.weight) / weightScale
			n++
			whole = false
		}
	}
	t.scratch = demands
	// Demands carry the Limiter's headroom over its forecast; the
	// water-filling weighs forecasts against the rate, so that a light
	// node is not given half again what it uses while a heavy one is
	// refused (8 nodes, one taking 80% at twice the limit: 20% of what
	// the ideal admits was refused). Every node scales every demand
	// alike, so the weights still sum to what the silent leave.
	perSec := float64(k.local.limit.Limit) / k.local.limit.Window.Seconds() * demandHeadroom
	total := 0.0
	for _, d := range demands {
		total += d
	}
	// Light: every peer heard from lately, and the forecasts together at
	// most half the rate (see slack).
	light = whole && total <= perSec/2
	if shares == fleet.Equal {
		return 1 / float64(n), n, light
	}
	if rate == 0 {
		return 0, n, light
	}
	avail := max(0, 1-reserved)
	w = waterFill(demands, total, rate, perSec, avail)
	if k.local.limit.Algorithm == local.SlidingWindow {
		w = min(w, t.unclaimed(k, n, avail-held, interval, now))
	}
	return w, n, light
}

// waterFill is the weight of a node demanding rate among demands (its
// own among them; total, their sum), out of avail of a key refilling
// perSec: max-min fair.
func waterFill(demands []float64, total float64, rate uint64, perSec, avail float64) float64 {
	capacity := perSec * avail
	if total <= capacity {
		return avail * float64(rate) / total
	}
	slices.Sort(demands)
	left := capacity
	for i, d := range demands {
		if even := left / float64(len(demands)-i); d > even {
			return min(float64(rate), even) / perSec
		}
		left -= d
	}
	return float64(rate) / perSec
}

// unclaimed is the most a sliding window's node weighs: its equal part
// of the fleet it knows (size members), or, past it, what the weights
// its live peers that are members last sent leave (left: what the
// silent leave, less those). A sliding window's meter is the node's weight's part of the
// window's count, with no memory of the weight it had, so weights that
// sum past one admit past the limit at once. They did while every
// forecast rose together: each node saw its own rise a round or two
// before it heard the others', weighed itself against their older,
// lower forecasts at 0.2-0.9 where the fleet's weights were 1/8 each,
// and spent its part of that before the views caught up. The
// simulator's bursts from quiet (1 s at three times the rate every 3 s,
// 8 nodes, gossip, seed 1) admitted 124% of what an ideal limiter
// admits, its worst window 31% over; now 100.3% and 3.6%. A peer's rise
// to its equal part is not held back, so a peer that sent a weight
// below it and then rose can still overlap what another took from it:
// on 16 nodes 168% is now 115% (docs/gossip.md).
//
// For three intervals (at least coldStart) after its table first held
// a key, by its own first sync or a peer's entry, a node also counts
// every member it has not heard from on the key at its equal part: on
// a cold start no node has heard another and each took the whole key
// (issue 20: a node that has not heard the fleet spends only its part).
// After that a member not heard from is taken not to use the key. The
// clock is the key's in the table, not this node's use of it: a change
// of policy, or a node that starts using a key it has heard its peers
// use, is not a cold start (with the node's own first sync as the
// clock, a raised limit held a heavy node to its equal part, and
// refused it everything, for four rounds).
//
// The price is a round or two of the lending: a heavy node takes what
// the light ones leave once they have heard it and sent their lower
// weights. At a cold start of the skewed scenario (one node of 8 takes
// 80% at twice the limit) 0.17% of the requests are refused under the
// limit, all in its first 600 ms. A token bucket needs no such cap: its
// meter refills at its weight's part of the rate, so a weight that
// jumps for a round takes a round's refill, and the cap cost it more
// than it saved (bursts over 16 nodes: false rejection 0.01% to 11%).
func (t *table) unclaimed(k *key, n int, left float64, interval time.Duration, now instant) float64 {
	size := max(n, t.members)
	if now.mono-k.born <= max(int64(3*interval), int64(coldStart)) {
		left -= float64(size-n) / float64(size)
	}
	return max(1/float64(size), left)
}

// coldStart is the least time a key is new to a table, and its members
// not heard from on it counted at their equal parts (see unclaimed):
// about as long as an update takes to reach most of a fleet of 16
// (docs/gossip.md), so that a short interval does not end it before
// the first updates can come (8 nodes at 10 ms: weights summing to 8).
const coldStart = 300 * time.Millisecond

// demandHeadroom is how much more than its forecast a hybrid Limiter
// asks for (hybrid's headroom): the water-filling takes it back out.
const demandHeadroom = 1.5
