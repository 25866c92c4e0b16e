package hybrid

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/store"
)

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

// cutCompanions is how many resting keys a round syncs beside keys cut
// off alone (see restless): on a Cluster of three masters, sixteen keys
// all on the dead master's slots are one chance in 43 million.
const cutCompanions = 16

// settledRest is how long a key far from its limit may rest between
// syncs once it has been in use for two IdleTimeouts (see holdOf), if
// the IdleTimeout is shorter and store.MaxHold Intervals (10,000)
// longer. Each node's share of a key then costs Redis a sync every two
// minutes or so, rather than every IdleTimeout: 8 nodes sharing 10,000 keys at the
// defaults asked for 9,100 key syncs a second, more than one Redis
// made (a warm-up that never ended, at 0.78 of a Redis core), and ask
// for about 900 once settled (BenchmarkFleetManyKeys: 814-1,365 over
// the 100 s after a start of 30-35 s, 0.06-0.11 of a core, with rests of
// 100 s; 805-808 and 0.06 with two minutes, over the 100 s that hold
// the first rests' end). What a longer
// rest costs is bounded by the lease it stands on: a resting lease is
// at most a quarter of the burst's part of each node, and all of a
// key's resting leases at most half its burst, which a node that dies
// holds out of the fleet's bucket until they lapse; a Reset on another
// node reaches a resting lease when it lapses (see Reset).
const settledRest = 2 * time.Minute

// holdOf is the Hold k asks of the fleet at now (fleet.Usage.Hold): the
// longest its lease may stand while it rests. The IdleTimeout at first,
// so that a key seen once, handed back an IdleTimeout later, leaves
// Redis its state for no longer than before (Redis keeps it about a
// Hold: with two minutes, a flood of one-off keys would take eight
// times the memory); settledRest, at most store.MaxHold Intervals, once k has
// been in use for two IdleTimeouts since its first grant. Sync loop
// only.
func (l *Limiter) holdOf(k *keyState, now int64) time.Duration {
	most := time.Duration(math.MaxInt64)
	if l.cfg.Interval < math.MaxInt64/store.MaxHold {
		most = store.MaxHold * l.cfg.Interval
	}
	if idle := l.cfg.IdleTimeout; k.hasGrant.Load() && (now-k.since)/2 > int64(min(idle, most)) {
		return min(most, max(idle, settledRest))
	}
	return min(most, l.cfg.IdleTimeout)
}

// restless keeps the keys of batch that this regular round must sync;
// the others rest (see rests). Sync loop only.
//
// Each round still syncs a resting key, the one synced longest ago of
// those it looked at and of cutCompanions parked keys taken in turn
// through the walk (restCandidates: the walk passes over the others),
// so that a fleet gone away shows in Health within an interval and
// resting keys take turns to be heard. While the last round reached no fleet, no key
// rests, and while a key is cut off alone (a Cluster master down) the
// cutCompanions resting keys synced longest ago are synced with it: a
// round made of such keys alone, none answered, counts as an outage of
// the fleet. (Every resting key was, once: on a single Redis under load,
// a call that timed out cut its keys off, every round then synced every
// resting key, and the load kept calls timing out: at 8 nodes × 10,000
// keys, a node synced 6,000-8,000 keys a second where the others, none
// cut, synced under 100.) (A resting key's sync that
// finds its part down alone, its early sync or its turn, still does so
// for one round: the next, every key synced, tells the part from the
// whole.)
func (l *Limiter) restless(batch []*keyState, now int64) []*keyState {
	if l.degraded.Load() {
		return batch // the last round reached no fleet: every key, as before resting
	}
	out, resting := l.syncs.awake[:0], l.syncs.resting[:0]
	defer func() { l.syncs.awake, l.syncs.resting = out[:0], resting[:0] }()
	cut, crowded, gen := false, l.crowded(), l.policies().gen
	batch = l.restCandidates(batch, now, cutCompanions)
	for _, k := range batch {
		k.parked.Store(true) // before rests and gen are looked at: see park
		if !l.rests(k, now, crowded) || k.gen.Load() != gen {
			// Synced this round; one whose policy is to be resolved
			// again (Invalidate, a limit asked for) since collect
			// looked is moved by the next.
			l.unpark(k)
			out = append(out, k)
			cut = cut || k.failing.Load()
			continue
		}
		l.park(k) // a parked key answered at once keeps its park; one looked at again, its new one
		resting = append(resting, k)
	}
	n := 1
	if cut {
		n = cutCompanions // a part of the fleet is down: see above
	}
	return oldest(out, resting, n)
}

// oldest appends to out the n keys of resting synced longest ago, in one
// pass (a sort of every resting key, each round a Cluster master is
// down, would cost a million keys' node some 100 ms a round). Ties go by
// key: the table's order is random, and the simulator must repeat.
func oldest(out, resting []*keyState, n int) []*keyState {
	before := func(a, b *keyState) bool {
		// Keys synced in one round tie: by their hash first, as a
		// comparison of the keys took 12% of a round of 100,000
		// resting keys.
		return a.lastSync < b.lastSync || a.lastSync == b.lastSync && (a.hash < b.hash || a.hash == b.hash && a.key < b.key)
	}
	start := len(out)
	for _, k := range resting {
		switch {
		case len(out)-start < n:
			out = append(out, k)
		case before(k, out[len(out)-1]):
			out[len(out)-1] = k
		default:
			continue
		}
		for i := len(out) - 1; i > start && before(out[i], out[i-1]); i-- { // kept in order, longest ago first
			out[i], out[i-1] = out[i-1], out[i]
		}
	}
	return out
}

// rests reports whether k may skip the regular round at now, and if so
// brings its forecast and counts up to date as a sync would. The fleet
// lets a key rest by granting its lease for longer than two intervals
// (fleet.Usage.Hold: see holdOf): Redis does so while
// what the key has spent and the lease come to at most a quarter of
// its burst (a sliding window: what its window counts, leases out
// included, at most three quarters of its limit, and never past the
// window's edge), for a lease of at most a quarter of the burst's part
// of each node. k rests while that lease stands past the round after next
// with a round trip to spare, covers what k's forecast spends until
// then above its low-water mark (below it, k asks for an early sync as
// any key does), nothing was refused since the last sync, and k is not about to
// go idle (an idle key syncs to hand its lease back), after its first
// restSyncs syncs. Keys split into
// stripes or lease shards, or handing over from shards, sync every
// round, and so does a sliding window while its lease is paced or it
// crossed its window's edge on its credit (edgecredit.go); Redis lets a
// sliding window rest until its window's edge at most, where its lease
// lapses.
//
// A key found resting is parked until the soonest of these could first
// fail by time alone: its lease's lapse (with the margin and its wake
// jitter), its going idle, and its forecast spending the lease down to
// the low-water mark and the margin's need. Until then the walk passes
// over it (walk.go), and rests, asked about it, answers at once, unless
// k was offered a request meanwhile, refused, asked for an early sync
// (which the loop may not have taken: a full queue, or ManualSync), or
// failed, each of which wakes it, the table is crowded (keys go idle
// sooner), or a sync or a policy change unparked it; spending faster
// than the forecast asks for an early sync at the low-water mark, as any
// key does. A key found offered traffic since its last look is looked
// at again the next round. (Looked at in full every round, a round of
// 100,000 resting keys took 23 ms, of a million 301 ms: three
// Intervals. Looked at once a second, so that Stats counted what it
// admitted, a million keys offered Zipf(1.1) took half the loop's CPU,
// and 78% of rounds ran late.) crowded is l.crowded(). Sync loop only.
func (l *Limiter) rests(k *keyState, now int64, crowded bool) bool {
	// As the walk does: a park reckoned with a shorter round trip or lag
	// than now is looked at again, with the margin of now.
	if l.parkDue(now) < k.parkAt && !crowded && !k.early.Load() && !k.failing.Load() && k.refused.Load() == k.refusedSeen {
		return true
	}
	iv := int64(l.cfg.Interval)
	margin := 2*iv + iv/5 + l.syncs.rtt + l.syncs.pace.lag // the round after next, however late the loop runs
	// A sliding window's lease lapses at its window's edge whatever a
	// sync before it brings, and its credit carries it across (the
	// crossing asks for a sync): granted to rest on (a TTL past two
	// intervals: Redis rests it until the edge at most), it rests until
	// its lease lapses, and wakes within an interval after, by its key's
	// hash, so that the keys of one edge do not all come in one round;
	// Redis still hears the node on the keys it syncs (see scan). (Woken
	// before the edge, as a token bucket's lease is before it lapses, a
	// key far under its limit synced 4-5 times a window where it rested:
	// the simulator's zipf on 8 nodes, 28,700 key syncs a second.)
	sliding := k.policy().paced
	need := margin
	if sliding {
		need = iv
		if k.expires-k.lastSync <= 2*iv {
			return false // not granted to rest on
		}
	}
	if !k.hasGrant.Load() || k.syncs < restSyncs || k.expires-now <= need || k.failing.Load() || k.leaving ||
		k.leaseShards() != nil || k.stripes.Load() != nil || sliding && (k.pace.pacing(now) || k.pace.crossed()) || k.handoverOf().pending ||
		k.refused.Load() != k.refusedSeen || now-k.activeAt > l.idleAfter()-3*iv {
		return false
	}
	// Keys that came together (a node's start) rest on leases that
	// lapse together: each wakes up to a quarter of its lease early, by
	// its key's hash, so that one round does not carry them all
	// (TestRestingKeysWakeApart: 454 of 500 keys in one round before,
	// 99 with a tenth).
	wake := k.expires - margin - (k.expires-k.lastSync)/400*int64(k.hash%100)
	if sliding {
		wake = k.expires + iv*int64(k.hash%100)/100
	}
	if now >= wake {
		return false
	}
	spare := func() int64 {
		return allowanceOf(k.word.Load()) - k.low.Load() - ceil(k.rate*float64(margin)/1e9*headroom)
	}
	if spare() < 0 {
		return false
	}
	m := mark{refused: k.refused.Load()}
	m.s0, m.raw = k.markSpent()
	busy := m.s0 != k.spentSeen || m.refused != k.refusedSeen
	l.forecast(k, now, m)
	k.roll(now, m.s0)
	wake = min(wake, k.activeAt+l.idleAfter()-3*iv)
	if busy {
		// Offered traffic since the last look: looked at again next
		// round, so that its forecast follows a surge. Parked for long,
		// a forecast spreads a surge over the whole park (a rate of 20
		// a second where 133 came), and the early syncs of a quiet key
		// that turned busy asked for too little: a Cluster's live keys,
		// quiet then at twice their limit, admitted 94.6% of the ideal
		// (TestMasterDownOnCluster), 96.7-98.4% before parking. Not
		// parked at all: parked to the next round's expected time, a
		// round come early passed over it, and it waited two; its
		// decisions need not wake it (see decide).
		k.parkAt = 0
		k.parked.Store(false)
		return true
	}
	if k.rate > 0 { // by the forecast just made
		wake = min(wake, now+int64(min(float64(max(0, spare()))/k.rate*1e9, float64(wake-now))))
	}
	k.parkAt = wake
	return true
}
