package hybrid

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// syncState is the sync loop's scratch space, reused across syncs under
// Limiter.syncMu.
type syncState struct {
	rng       *rand.Rand
	batch     []*keyState
	awake     []*keyState // the batch's keys that do not rest: see restless
	resting   []*keyState // and those that do
	need      []keyNeed   // a long round's keys, by need: see byNeed
	sorted    int         // how many of need are in order: see neediest
	calls     int         // the calls the last long round made (at least 1)
	marks     []mark
	lastSweep int64
	lastRoom  int64
	walk      walkList    // every key held, for the rounds to look at: see walk.go
	deferred  int         // keys the last round left for the next
	chunk     int         // the most keys a call carries: see syncRound
	lastHot   int64       // when the hot-key sketch was last read
	sharded   []*keyState // Strict keys sharded in Redis
	consumed  []int64     // callLeases: each batch key's unreported consumption
	owed      []*keyState // Strict keys with admissions to charge to the store
	probe     *keyState   // a Strict key, to probe the store's breaker with
	charges   []store.StrictCharge
	chargeOf  []int    // the owed key each charge is for
	spentAt   []int64  // each owed key's extra when its charge was sent
	targets   []target // callLeases: what each Usage of a request is for
	rtt       int64    // the sync round trip, a moving average (ns)
	pace      pace     // when regular rounds start, and how late: see lateRound
	cutOnly   bool     // the batch in sync is of keys cut off alone, after the round reached the rest (see syncCut)
	leased    int64    // the most active nodes any grant reported (nodesHint's floor for a census)
	counted   bool     // a census has answered
	censusAt  int64    // when the last census was asked for
}

// mark is what a sync read from a key's counters when it started.
type mark struct {
	s0      int64  // spent, in full
	raw     uint32 // the words' spent, wrapping, as grant takes it
	refused uint64
}

// SyncOnce reports every active Hybrid key's consumption to the fleet and
// installs the leases it grants, in calls to the Syncer (and to the
// Failover, if set) sized to take at most about half of SyncTimeout
// each; keys that rest (far from their limit, on a lease that covers
// their traffic, granted for up to their Hold: see Config.IdleTimeout)
// are left for a later
// round, but for the one synced longest ago, and for all of them while
// a key is cut off alone (see restless). The background loop calls it
// every Interval; with
// Config.ManualSync the caller does. A round starts no call after one
// Interval: keys it did not reach keep their leases and go first in the
// next round (a node with more keys than a round carries syncs each less
// often, and logs so; it is not an outage).
//
// An error means no fleet was reached (or one answered nonsense): leases
// stand until they lapse, then each policy's FailMode decides, and what
// was consumed meanwhile is reported by the next SyncOnce that reaches the
// fleet. A fleet whose circuit breaker is open is not called; SyncOnce
// probes it once its cool-down has passed.
func (l *Limiter) SyncOnce(ctx context.Context) error {
	err := l.syncOnce(ctx)
	l.watchHealth()
	return err
}

func (l *Limiter) syncOnce(ctx context.Context) (err error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	now := l.tick()
	keys := 0
	defer func() { l.countRound(time.Duration(l.now()-now), keys, err) }()
	l.lateRound(now)
	l.sched.next.Store(now + int64(l.cfg.Interval))
	l.shardHot(ctx, now)
	batch := l.restless(l.collect(now, false), now)
	keys = len(batch)
	if tr := l.cfg.Tracer; tr != nil && (keys > 0 || len(l.syncs.owed) > 0) { // an idle round calls no fleet: no span
		var end func(error)
		ctx, end = tr.Start(ctx, "sync", "", keys)
		defer func() { endSpan(end, err) }()
	}
	l.tendLeaseShards(ctx, now, batch)
	err = l.syncRound(ctx, now, batch, regular, l.cfg.Interval)
	l.publishRefused(now)
	l.chargeStrict(ctx, l.now(), l.syncs.owed, l.syncs.probe, len(batch) > 0)
	l.countFleet(ctx, l.now(), len(batch) > 0)
	return err
}

// syncKind is why a batch is synced.
type syncKind int

const (
	regular syncKind = iota // every Interval: may probe an open breaker
	early                   // a lease runs low: closed breakers only
	closing                 // Close: hand leases back; its last chance, so it may probe
)

// syncBatch syncs batch with the fleets, and installs the grants of the
// first that answers: Syncer while its breaker is closed, else Failover.
// Both are told what was consumed, so either can take over. Closing hands
// every lease back.
func (l *Limiter) syncBatch(ctx context.Context, now int64, batch []*keyState, how syncKind) error {
	if len(batch) == 0 || len(l.fleets) == 0 {
		return nil
	}
	s := &l.syncs
	s.marks = s.marks[:0]
	for _, k := range batch {
		m := mark{refused: k.refused.Load()}
		m.s0, m.raw = k.markSpent()
		if how != closing {
			// Closing, no grant comes to take what the credit spent:
			// reported in full (see crossedAt).
			k.crossedAt(&m, len(l.fleets))
		}
		l.forecast(k, now, m)
		k.roll(now, m.s0)
		k.requested = 0
		if how != closing {
			k.requested = l.demand(k, now, max(0, m.s0-k.granted))
		}
		if k.requested > 0 {
			k.syncs++
		}
		s.marks = append(s.marks, m)
	}
	// While Syncer's breaker is not closed, Failover goes first, so that
	// its grants are in before a probe of Syncer waits out its timeout.
	order := [2]int{0, 1}
	if len(l.fleets) > 1 && !l.fleets[0].closed.Load() {
		order = [2]int{1, 0}
	}
	var errs []error
	var chosen *fleet.Response
	for _, i := range order[:len(l.fleets)] {
		f := l.fleets[i]
		if !f.allow(l.wall(now), how != early) {
			errs = append(errs, f.errOpen())
			continue
		}
		// The outcome is dated when the call was sent, so that a probe
		// that waited out its timeout does not push the next one back by
		// as much: the node probes once per cool-down, not per cool-down
		// plus timeout.
		start := l.now()
		sent := l.wall(start)
		f.answered = chosen != nil
		resp, err := l.call(ctx, f, i, batch, s.marks)
		if err != nil && s.cutOnly && errors.Is(err, fleet.ErrUnreachable) {
			resp, err = cutResponse(len(batch), err), nil // see syncCut
		} else {
			f.result(sent, err)
			f.timed(l.cfg.SyncTimeout, err)
		}
		if err != nil {
			for _, k := range batch {
				k.forgetStale(i)
			}
			errs = append(errs, err)
			continue
		}
		for j, k := range batch {
			if g := &resp.Grants[j]; errors.Is(g.Err, errUnsettled) {
				continue // reported again next time
			} else if g.Err != nil {
				// Refused for this key alone: reported again next
				// time, as after an outage, until it is taken or too
				// old to count.
				k.forgetStale(i)
			} else if s.marks[j].s0 > k.reported[i] {
				k.reported[i] = s.marks[j].s0
			}
		}
		if chosen != nil {
			continue
		}
		chosen = resp
		after := l.now()
		if !s.cutOnly { // a dead part's wait is no round trip the leases must cover
			s.observeRTT(after - start)
		}
		factor := 1.0
		if resp.Partitioned > 0 {
			l.cutOff(after, after-int64(resp.Partitioned), true)
			factor = math.Float64frombits(l.factor.Load())
		} else if how != closing {
			l.reached(after)
		}
		l.degraded.Store(false)
		for j, k := range batch {
			l.settle(k, after, start, s.marks[j], &resp.Grants[j], how == closing, factor)
		}
	}
	if chosen == nil {
		l.unreached(now, batch)
		return errors.Join(errs...)
	}
	return nil
}

// settle installs one key's grant, capped by factor: the ladder's, when
// the grant comes from one side of a split. now is when it arrived, sent
// when its call was sent.
func (l *Limiter) settle(k *keyState, now, sent int64, m mark, g *fleet.Grant, closing bool, factor float64) {
	k.early.Store(false)
	elapsed := min(now-k.lastSync, 2*int64(l.cfg.Interval))
	k.lastSync = now
	l.unpark(k)
	if g.Err != nil {
		if !errors.Is(g.Err, errUnsettled) {
			if errors.Is(g.Err, fleet.ErrUnreachable) {
				l.keyCut(k, now) // its part of the fleet is down: see keyCut
			} else if !k.hasGrant.Load() {
				// The starter credit was lent against a grant the
				// fleet has now refused: the FailMode decides from
				// here, not the credit.
				k.zero()
			}
			l.keyFailed(k, g.Err) // past what it holds, the FailMode decides
			if !closing && k.idle && k.spent() == m.s0 && k.allReported(len(l.fleets), m.s0) {
				// Idle, and what it spent too old to report: a key
				// the fleet never answered is forgotten like any other.
				l.forget(k)
			}
		}
		return
	}
	l.keyAnswered(k)
	k.keyReached(now)
	lease := max(0, min(g.Lease, maxAllowance))
	if factor < 1 {
		// The ladder cuts the node's share, not its demand: what it may
		// spend until the next sync is factor x its weight of the rate,
		// for the time since the last one. The fraction of a token
		// carries over, so small shares are not rounded away.
		c := factor*g.Weight*k.policy().perSec*float64(elapsed)/1e9 + k.carry
		if whole := int64(c); whole < lease {
			lease, k.carry = whole, min(c-float64(whole), 1)
		}
	} else {
		k.carry = 0
	}
	// A lease that runs low is a reason to sync early, not to refuse,
	// when the node got what it asked for; a node whose share of a key
	// at its limit is spent waits for the regular sync, so early syncs
	// do not grow with traffic. But a lease for less than an interval
	// (the window is no longer) must be refilled within the interval,
	// whatever it was cut to: such a key syncs early at most four times
	// a window (see gapOf). In the simulator (8 nodes, 2x load, 1 s
	// window) this took false rejection at a 2 s interval from 45% to
	// 2.6% over Redis and from 67% to 2.0% over gossip, at about 38
	// syncs a second a key instead of 8. (Syncing early also when the
	// grant said the fleet had room beside a short lease halved Redis's
	// under-limit refusals in bursts, 0.108% to 0.054%; but over gossip,
	// whose Remaining is each node's own lagging estimate, it quadrupled
	// the syncs in a partition and raised the worst window from 67% to
	// 73%, and at a 500 ms interval quadrupled the worst window.)
	k.floored.Store(2) // granted: no starter credit to top up (see topUp)
	paced := k.pacedOf(g, lease, factor < 1 || closing)
	whole := lease + paced
	low := int64(0)
	if !closing && !k.capped && whole > 0 && (whole >= k.requested || l.cfg.Interval >= k.policy().Window) {
		low = l.lowWater(k, whole)
	}
	until := l.leaseEdge(k.policy(), sent, whole, g)
	if k.policy().paced && k.stripes.Load() == nil {
		if until <= now && k.pace.crossed() {
			// Sent before the edge, answered after it: the lease lapsed
			// before it came, and the key crossed on its credit meanwhile
			// (crossEdge). The credit stands until the next grant, asked
			// for at once; the lease goes back to the fleet, unspent, at
			// the next report, and the one after reports what the credit
			// spent as the crossing's (crossedAt). Installed, it would
			// have lent a second credit in the one window. The key is
			// still crossed, so its early sync waits no gap (gapOf).
			whole, low = 0, 0
			if !closing {
				defer l.askEarly(k)
			}
		} else {
			credit := int64(0)
			if !closing && factor >= 1 {
				credit = l.edgeCredit(k, whole, g)
			}
			k.grantPaced(m.raw, lease, paced, g.PacedFor, now, low, until, credit)
		}
	} else {
		k.grant(m.raw, lease, low)
		k.until.Store(until)
	}
	k.low.Store(low)
	k.granted = m.s0
	if !closing {
		l.rounds.leases.Add(1)
		l.rounds.leased.Add(uint64(max(0, whole)))
		l.stripe(k)
	}
	k.lease, k.expires = whole, now+int64(g.TTL)
	if r := k.rare; r != nil {
		r.share -= float64(whole) // Equal shares (see entitled)
	}
	k.nodes = int32(min(max(g.Nodes, 0), math.MaxInt32))
	k.weightBits.Store(math.Float64bits(g.Weight))
	if !k.hasGrant.Load() {
		k.since = now
	}
	k.hasGrant.Store(true)
	for h := l.nodesHint.Load(); int64(g.Nodes) > h && !l.nodesHint.CompareAndSwap(h, int64(g.Nodes)); h = l.nodesHint.Load() {
	}
	l.syncs.leased = max(l.syncs.leased, int64(g.Nodes))
	k.fleetRemaining.Store(g.Remaining)
	k.resetAt.Store(now + int64(g.ResetAfter))
	k.resetFallback()
	if !closing && k.idle && lease == 0 && k.spent() == m.s0 && k.allReported(len(l.fleets), m.s0) {
		l.forget(k)
	} else if k.leaving && !closing {
		l.askEarly(k) // to report what it spent since, and go
	}
}

// run is the sync loop: a regular sync every Interval with jitter, and
// early syncs for keys whose lease runs low.
func (l *Limiter) run(ctx context.Context) {
	defer close(l.done)
	due := l.now() + l.jittered()
	for {
		l.sched.next.Store(due)
		t := l.clk.NewTimer(time.Duration(due - l.now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
			_ = l.SyncOnce(ctx) // an outage shows in Decisions; the loop goes on
			// The next sync is due an Interval after this one was, so
			// that a sync that waited out its timeout does not slow the
			// cadence much, but at least half an Interval after this one
			// ended, so that a stalled loop does not sync back to back.
			due = max(due+l.jittered(), l.now()+int64(l.cfg.Interval/2))
		case k := <-l.early:
			t.Stop()
			l.syncEarly(ctx, k)
		}
	}
}

// jittered is Interval give or take a tenth, so that a fleet's nodes do
// not all sync at once.
func (l *Limiter) jittered() int64 {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	i := float64(l.cfg.Interval)
	return int64(i * (0.9 + 0.2*l.syncs.rng.Float64()))
}

// syncEarly syncs k and any other keys waiting for an early sync. A key
// is synced early at most once per quarter interval or 10 ms, whichever is
// shorter, so that a key whose demand outruns every forecast cannot flood
// the fleet: the loop waits out the rest of the gap first.
func (l *Limiter) syncEarly(ctx context.Context, k *keyState) {
	l.syncMu.Lock()
	wait := l.gapOf(k) - (l.now() - k.lastSync)
	l.syncMu.Unlock()
	if wait > 0 {
		t := l.clk.NewTimer(time.Duration(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	_ = l.earlyRound(ctx, k)
}

// earlyGap is the least time between two syncs of a key, in ns: a
// quarter interval or 10 ms, whichever is shorter. The background loop
// waits it out before an early sync; the simulator does too.
func (l *Limiter) earlyGap() int64 { return int64(min(l.cfg.Interval/4, 10*time.Millisecond)) }

// gapOf is the least time between two syncs of k: none once k crossed its
// window's edge, the early-sync gap (earlyGap), or an eighth of the
// window for a key whose window is no longer than the interval and whose
// lease was cut short of its demand (the key is at its limit, and syncing
// more often would only load the fleet). The stores lease such a key at
// most its part of twice what the limit refills in that turn (turnOf in
// global's scripts): at a quarter window the leases came in lumps that
// swung the fleet's windows (interval 2 s on a 1 s window, 8 nodes at
// twice the limit, three seeds: worst window 8.5-11% over the ideal,
// skewed 10-15%; at an eighth 3-3.8% and 4.5-6.2%, at 60 and 50 key
// syncs a second rather than 34 and 33).
// Sync loop only.
func (l *Limiter) gapOf(k *keyState) int64 {
	if k.pace.crossed() {
		// Crossed its window's edge on its credit: the sync that leases
		// in the new window goes at once, once a window at most. (Waiting
		// the gap after a grant that lapsed before it came, bursts on a
		// sliding window refused 0.055% of their requests under the
		// limit, not 0.023%.)
		return 0
	}
	if l.cfg.Interval >= k.policy().Window && k.lease < k.requested {
		return max(l.earlyGap(), int64(k.policy().Window/8))
	}
	return l.earlyGap()
}

// syncWaiting syncs at once the keys that asked for an early sync, except
// those synced less than a quarter interval (or 10 ms) ago, which may ask
// again. The background loop does this by itself; with Config.ManualSync
// nothing does, but the simulator (internal/manual).
func (l *Limiter) syncWaiting(ctx context.Context) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.earlyBatch(ctx, nil)
}

// earlyBatch syncs first, if not nil, and the other keys waiting for an
// early sync. syncMu is held.
func (l *Limiter) earlyBatch(ctx context.Context, first *keyState) error {
	now := l.tick()
	batch := l.syncs.batch[:0]
	add := func(k *keyState) {
		if k.retired.Load() {
			return
		}
		if now-k.lastSync < l.gapOf(k) {
			k.early.Store(false) // just synced; it may ask again
			return
		}
		batch = append(batch, k)
	}
	if first != nil {
		add(first)
	}
	for more := true; more && len(batch) < cap(l.early); {
		select {
		case k := <-l.early:
			add(k)
		default:
			more = false
		}
	}
	l.syncs.batch = batch
	if l.degraded.Load() || !l.anyClosed() {
		for _, k := range batch {
			k.early.Store(false)
			l.unpark(k) // for the regular round to sync
		}
		return nil // the regular sync finds out when the fleet is back
	}
	return l.syncBatch(ctx, now, batch, early)
}

// Close hands this node's leases back to the fleet, reporting the last of
// its consumption, and stops the sync loop. It starts no call to the
// fleet after SyncTimeout, and waits at most SyncTimeout for each; leases
// not handed back lapse. Afterwards the Limiter decides Hybrid and Strict
// keys as if the fleet were unreachable. Close is safe to call more than
// once.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.cancel()
		if l.done != nil {
			<-l.done
		}
		l.syncMu.Lock()
		defer l.syncMu.Unlock()
		now := l.now()
		batch := l.collect(now, true)
		if len(batch) > 0 {
			l.closeErr = l.syncRound(context.Background(), now, batch, closing, l.cfg.SyncTimeout)
		}
		// What Strict keys admitted without the store, and is not
		// charged yet, is charged now or never.
		l.chargeStrict(context.Background(), now, l.syncs.owed, nil, true)
		l.degraded.Store(true)
	})
	return l.closeErr
}
