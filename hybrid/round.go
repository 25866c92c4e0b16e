package hybrid

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
)

// Calls to a fleet carry at most s.chunk keys, sized so that a call takes
// between a quarter and a half of SyncTimeout: halved when a call took
// longer, grown by a quarter when it took less. A lease script costs
// about 25 µs a key on a loopback Redis and about 100 µs under the race
// detector on 2 cores; one call for every key took 233-278 ms at 10,000
// keys and failed as an outage while Redis was up.
const (
	firstChunk = 256
	minChunk   = 16
	maxChunk   = 8192
)

// syncRound syncs batch in calls of at most a chunk of keys each, for at
// most budget. When one call cannot carry every key, the keys synced
// longest ago go first, and what the budget does not reach goes first in
// the next round, its leases standing meanwhile: a round too long for
// every key costs those keys a later sync, never the node its health. A
// call that fails is an outage, as for a single call, and ends the round.
// Keys cut off alone go last, in calls of their own (see splitCut).
func (l *Limiter) syncRound(ctx context.Context, now int64, batch []*keyState, how syncKind, budget time.Duration) error {
	s := &l.syncs
	if how == regular {
		defer l.answeredEarly(now)
	}
	if s.chunk == 0 {
		s.chunk = firstChunk
	}
	batch, cut := l.splitCut(now, batch, how)
	ordered := len(batch) > s.chunk
	if ordered {
		l.byNeed(batch)
		defer clear(s.need) // hold no key past the round
	}
	made := 0 // calls
	if ordered {
		defer func() { s.calls = max(1, made) }() // see neediest
	}
	// The budget counts from the round's start, but gives its calls at
	// least half of it, and at least as long as the round took to get
	// to them: at a million keys awake (a node's start) the walk and
	// the order took 250 ms, and left one call of keys to each round
	// (1,500 key syncs a second, Redis at a twentieth of a core).
	first := l.now() // when the first call starts
	end := max(now+int64(budget), first+max(int64(budget)/2, first-now))
	for i := 0; i < len(batch); {
		t := l.tick()
		if i > 0 && t >= end {
			l.noteDeferred(len(batch)-i, len(batch))
			return nil
		}
		n := min(s.chunk, len(batch)-i)
		if ordered {
			l.neediest(batch, i, n)
		}
		made++
		if err := l.syncBatch(ctx, t, batch[i:i+n], how); err != nil {
			return err
		}
		took := time.Duration(l.now() - t)
		switch {
		case took > l.cfg.SyncTimeout/2:
			s.chunk = max(minChunk, s.chunk/2)
		case took < l.cfg.SyncTimeout/4 && n == s.chunk:
			s.chunk = min(maxChunk, s.chunk+s.chunk/4)
		}
		i += n
	}
	l.noteDeferred(0, len(batch))
	return l.syncCut(ctx, cut, how)
}

// keyNeed is a key of a long round, and how much it needs a sync.
type keyNeed struct {
	k        *keyState
	group    int   // 0: refused since its last forecast; 1: offered traffic; 2: neither
	offered  int64 // requests offered since its last forecast, admitted or not
	lastSync int64 // k.lastSync: compared without reading k
}

// needier orders keyNeeds by need: see byNeed.
func needier(a, b *keyNeed) int {
	return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(b.offered, a.offered), cmp.Compare(a.lastSync, b.lastSync))
}

// byNeed orders a round too long for one call so that the keys that most
// need a sync go first: those that refused a request since their last
// forecast, then those offered traffic, each by how much traffic, then
// the rest; the longest unsynced first among equals. A tenant in use
// beside 12,000 one-off keys is synced every round: ordered by age alone
// it was refused 78 times in 178, and with every key that had spent its
// starter credit counted as needy (each one-off key had) it still waited
// behind 10,000 of them and was refused up to 24 times in 147
// (TestManyKeysAreNotAnOutage). The one-off keys go in turn until they
// hand back. What each key offered is read once, so that the order holds
// while requests go on. byNeed reads them into syncs.need; neediest
// then picks each call's keys in turn, as far as the round's budget
// goes: at a million keys awake (a node's start) a sort of them all took
// 65% of the node's CPU, and left a round the time for one call.
func (l *Limiter) byNeed(batch []*keyState) {
	s := &l.syncs
	s.need = s.need[:0]
	for _, k := range batch {
		refused := int64(k.refused.Load() - k.refusedSeen)
		n := keyNeed{k: k, group: 2, offered: refused + k.spent() - k.spentSeen, lastSync: k.lastSync}
		switch {
		case refused > 0:
			n.group = 0
		case n.offered != 0:
			n.group = 1
		}
		s.need = append(s.need, n)
	}
}

// neediest puts in batch[i:i+n] the n neediest keys of those from i on
// (syncs.need, from byNeed), neediest first: a selection of them in
// time linear in what is left, then a sort. It selects for as many calls
// as the last long round made at once, so that a round of many calls
// does not select again for each (at a million keys, a backlog of keys
// left over took a quarter of the node's CPU in selections). Sync loop
// only.
func (l *Limiter) neediest(batch []*keyState, i, n int) {
	s := &l.syncs
	if i == 0 {
		s.sorted = 0
	}
	if i+n > s.sorted {
		rest := s.need[i:]
		m := min(len(rest), max(n, s.chunk*s.calls))
		selectLeast(rest, m, needier, s.rng)
		slices.SortFunc(rest[:m], func(a, b keyNeed) int { return needier(&a, &b) })
		s.sorted = i + m
	}
	for j := i; j < i+n; j++ {
		batch[j] = s.need[j].k
	}
}

// selectLeast reorders s so that its first m elements are its m least
// by cmp, in no order: a quickselect, its pivots drawn from rng, so that
// no order of requests a client chooses makes it quadratic.
func selectLeast(s []keyNeed, m int, cmp func(a, b *keyNeed) int, rng interface{ IntN(int) int }) {
	lo, hi, k := 0, len(s)-1, m-1
	for lo < hi && k >= 0 && k < len(s)-1 {
		p := s[lo+rng.IntN(hi-lo+1)]
		i, j := lo, hi
		for i <= j {
			for cmp(&s[i], &p) < 0 {
				i++
			}
			for cmp(&p, &s[j]) < 0 {
				j--
			}
			if i <= j {
				s[i], s[j] = s[j], s[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return
		}
	}
}

// pace is when the loop's regular rounds start, and how late. Sync loop
// only.
type pace struct {
	last   int64    // when the last regular round started
	gap    int64    // the time between the last two regular rounds' starts when late after keys were left over, else 0
	worst  [2]int64 // the latest a round started, in this lagSpan and the last
	turned int64    // when worst[0] began
	lag    int64    // max(worst): what leases are sized for beyond the round trip
}

// A late round's start sizes leases for between one and two lagSpans of
// Intervals: a starved loop is late by fits (Go runs a goroutine woken by
// the network within some tens of scheduling slices), and an average of
// its lateness, which falls between fits, let leases run dry at the next
// (a moving average rising at once and falling by a sixteenth a round:
// 0.5-0.6% refused in TestStarvedNodeKeepsItsLeases). The lag counts at
// most maxLag Intervals: fits of 0.9-1.1 s were seen at 100 ms, more
// than the 4 Intervals a gap between rounds counts for.
const (
	lagSpan = 50
	maxLag  = 16
)

// lateFor is how many Intervals Health says Degraded after a refusal for
// lateness (see refusedLate): a starved goroutine may run again, and
// look, a second after it was refused.
const lateFor = 20

// schedule is when the loop's next regular round is due, and how late
// the loop runs, for the request path and Health.
type schedule struct {
	next     atomic.Int64 // when the next regular round is due
	late     atomic.Int64 // how late the last regular round started
	asked    atomic.Int64 // when a key asked for an early sync that the loop has not finished; 0 if none
	wait     atomic.Int64 // the sync round trip at the last regular round
	refused  atomic.Int64 // when a Hybrid key last refused while the loop ran late; 0 if never
	refusing atomic.Int64 // when such refusals began, the last time none had been for an Interval
	read     atomic.Int64 // the Limiter's clock as the sync loop last read it (see tick)
}

// tick reads the Limiter's clock for the sync loop, and leaves the reading
// for the decisions that need no clock of their own: a token bucket's
// lease is spendable until spent, whatever the time, and only its
// Decision's ResetAfter, the fleet's estimate as of the key's last sync,
// is reckoned from the loop's last reading (see decide). At a million
// keys a clock read cost a decision as much as the key's lookup: the
// clock's fence waits for the lookup's cache misses, where a map's
// lookups overlap (BenchmarkManyKeys). The loop ticks at least every
// Interval and every call of a long round, before the call (the grant's
// resetAt is dated at its reply), so ResetAfter is overstated by at most
// an Interval and a round trip; by more only while the loop runs late,
// which Health reports. Without a loop (ManualSync) decisions read the
// clock.
func (l *Limiter) tick() int64 {
	t := l.now()
	l.sched.read.Store(t)
	return t
}

// lateRound records when a regular round starts, and how late.
//
// The gap since the last round counts if that round left keys over and
// this one starts more than a quarter Interval late (past the loop's
// jitter of a tenth): leases are then sized for that gap (see horizon),
// at most 4 Intervals, so that the keys synced every round do not run
// dry between rounds that take longer than Interval. Otherwise it is
// 0: sizing leases for the jitter, or for a loop merely slowed by a
// loaded machine, raised the simulator's worst window (steady, Redis, 4
// nodes, 100 ms) from 6.20% to 6.85% and took TestLeaseShardsFleetWide
// past its bound under load.
//
// How late the round starts beside when the loop's timer was due counts
// too (see lagged). The loop's jitter is not lateness (the due time is
// jittered already); a ManualSync caller keeps its own time, and has
// none.
func (l *Limiter) lateRound(now int64) {
	s := &l.syncs.pace
	interval := int64(l.cfg.Interval)
	s.gap = 0
	if gap := now - s.last; l.syncs.deferred > 0 && s.last > 0 && gap > interval*5/4 {
		s.gap = min(gap, 4*interval)
	}
	s.last = now
	if l.cfg.ManualSync {
		return
	}
	late := max(0, now-l.sched.next.Load())
	l.sched.late.Store(late)
	l.lagged(now, late)
}

// lagged records that the regular round starting at now started late
// by late. Leases and the early-sync threshold (lowWater) are sized for
// the most of that in the last one or two lagSpans (lag), at most
// maxLag Intervals, so that they last until a late round's grant. A
// node whose cores are all busy runs its loop late: the timer has
// fired, or an early sync's Redis has answered, but the goroutine waits
// for a core. 32 goroutines calling Allow on 2 cores started rounds
// 60-1,100 ms late at a 100 ms Interval, and leases sized for one
// Interval ran dry until they came: 0.4-1.4% of requests refused at
// 10^9 a second, all while Healthy (TestStarvedNodeKeepsItsLeases).
// Lateness of a tenth of Interval or less is within the lease's
// headroom, and not counted, so that a loop merely slowed by a loaded
// machine does not grow leases (see lateRound). How long the round's
// calls take is not lateness: a starved wake-up after Redis answers
// shows in the round trip, which leases cover already, and a call that
// waited out a dead Redis before the Failover answered is an outage.
func (l *Limiter) lagged(now, late int64) {
	s := &l.syncs.pace
	interval := int64(l.cfg.Interval)
	if now-s.turned > lagSpan*interval {
		s.worst[1], s.worst[0], s.turned = s.worst[0], 0, now
	}
	if late > interval/10 {
		s.worst[0] = max(s.worst[0], min(late, maxLag*interval))
	}
	s.lag = max(s.worst[0], s.worst[1])
	l.sched.wait.Store(l.syncs.rtt)
}

// earlyRound syncs first, if not nil, and the other keys waiting for an
// early sync.
func (l *Limiter) earlyRound(ctx context.Context, first *keyState) error {
	l.rounds.early.Add(1)
	defer l.answeredEarly(l.now())
	return l.earlyBatch(ctx, first)
}

// answeredEarly records a round begun at start that synced every key
// asking for an early sync when it began: those that asked since wait in
// the channel, and count from start.
func (l *Limiter) answeredEarly(start int64) {
	if len(l.early) == 0 {
		l.sched.asked.Store(0)
	} else {
		l.sched.asked.Store(start)
	}
}

// refusedLate records a Hybrid refusal of k at now for a spent lease,
// and reports whether the refusing goroutine should yield its core to
// the sync loop. Not on the path of a request the lease covers.
//
// The refusal is for lateness, which Health reports for lateFor
// Intervals, if the fleet had room at k's last grant (the refusal is
// under the limit: a key at its limit, or a new key on its starter
// credit, is refused for what it has, not for the loop) and the loop
// runs late: a regular round is overdue by more than a quarter
// Interval, or an early sync asked for is not done within the early-sync gap (earlyGap), the
// last regular round's round trip and a quarter Interval. A quarter: a
// loop merely slowed by a loaded machine, or a distant Redis, is not a
// starved one, and a healthy fleet's tests (TestUnderLimitRefusals,
// TestFailoverToGossip) stayed Healthy only so. A ManualSync caller
// keeps the loop's time itself.
//
// While a round is overdue or k's early sync is waiting, the goroutine
// yields: on a machine whose cores are all busy the loop waits for one,
// most of all once Redis has answered (Go hands a goroutine woken by
// the network, when no core is idle, to a queue each core looks at only
// every 61 scheduling slices, some 300-600 ms with 16 goroutines a
// core), and the goroutines the lease refuses are the ones keeping it
// from a core. In TestStarvedNodeKeepsItsLeases, leases sized for the
// lag alone refused 0-2.2% of requests in three runs, yielding alone
// 0.08-0.19%, both 0.0003-0.0022%. A request is still refused at once
// (it does not wait for the sync), one scheduling slice later at most;
// one the lease covers never yields.
func (l *Limiter) refusedLate(k *keyState, now int64) (yield bool) {
	if l.cfg.ManualSync {
		return false
	}
	s := &l.sched
	next, asked := s.next.Load(), s.asked.Load()
	yield = now > next || k.early.Load()
	if k.fleetRemaining.Load() <= 0 {
		return yield
	}
	quarter := int64(l.cfg.Interval) / 4
	if now-next <= quarter && (asked == 0 || now-asked <= l.earlyGap()+s.wait.Load()+quarter) {
		return yield
	}
	last := s.refused.Load()
	if now-last < quarter/4 {
		return yield // recorded lately: spare the line many refusing goroutines share
	}
	if now-last > lateFor*int64(l.cfg.Interval) {
		s.refusing.Store(now)
	}
	s.refused.Store(now)
	return yield
}

// lateHealth is how late the loop runs at now: the last regular round's
// lateness or how overdue the next is, whichever is more; and, if it
// refused requests for lateness within the last lateFor Intervals, since
// when.
func (l *Limiter) lateHealth(now int64) (late time.Duration, refusingSince int64, refusing bool) {
	s := &l.sched
	if l.cfg.ManualSync {
		return 0, 0, false // the caller keeps the loop's time
	}
	late = time.Duration(max(s.late.Load(), now-s.next.Load(), 0))
	if r := s.refused.Load(); r > 0 && now-r <= lateFor*int64(l.cfg.Interval) {
		return late, s.refusing.Load(), true
	}
	return late, 0, false
}

// noteDeferred records how many of a round's keys it left for the next,
// and logs when rounds start and stop leaving keys over: a node with
// more keys than a round carries syncs each less often than Interval.
func (l *Limiter) noteDeferred(deferred, keys int) {
	was := l.syncs.deferred
	l.syncs.deferred = deferred
	switch {
	case deferred > 0 && was == 0:
		l.cfg.Logger.Warn("hybridlimit: a sync round cannot carry every key within its interval; the rest go first next round",
			slog.Int("keys", keys), slog.Int("deferred", deferred))
	case deferred == 0 && was > 0:
		l.cfg.Logger.Info("hybridlimit: sync rounds carry every key again", slog.Int("keys", keys))
	}
}
