package hybrid

import (
	"slices"
	"sync"
)

// The sync loop's walk: every key the table holds, in the order the node
// made them, each with when the loop must look at it again. A key
// parked (resting: see rests) is passed over without a look until then,
// so that a round costs the keys that need it, not every key held: a
// round walked the table and looked at every key, 113 ns a key at a
// million resting keys (BenchmarkRestingRound: 113 ms a round, over the
// default Interval), most of it the miss of each key's state; passing
// over a parked key reads its entry alone, in order.
//
// What ends a park before its time comes from a decision (a request
// offered to a quiet key, a refusal, an early sync the loop could not
// take, a key failing, a limit asked for or a key invalidated: wake) or from the loop itself (a sync, a policy
// change: unpark). Keys are walked in full, every entry looked at, on a
// policy change, while the node is cut off from its fleet, while the
// table is crowded, and at Close.

// walkEntry is one key of the walk.
type walkEntry struct {
	k     *keyState // nil once forgotten (dropped when the walk is compacted)
	until int64     // when the loop looks at k again; 0: every round
}

// walkList is the walk. Sync loop only.
type walkList struct {
	entries []walkEntry
	dead    int         // entries whose key was forgotten
	cursor  int         // where the next round's search for resting keys starts (see restCandidates)
	gen     uint32      // the policy table's generation the last round saw
	at      int64       // when the last round took the inbox (see takeInbox)
	spare   []*keyState // takeInbox's other buffer
}

// walkInbox is what other goroutines hand the walk: keys made, and
// parked keys a decision needs looked at. Safe for concurrent use.
type walkInbox struct {
	mu    sync.Mutex
	fresh []*keyState
	bound int // fresh's length beyond which its forgotten keys are dropped (see register)
	woken []*keyState
}

// register adds k, just stored in the table, to the walk at its next
// round. Safe for concurrent use.
func (l *Limiter) register(k *keyState) {
	in := &l.inbox
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.fresh) >= max(in.bound, 1024) {
		// No round has taken them (ManualSync without SyncOnce, or
		// closed): keep those not forgotten since, as the table does.
		in.fresh = slices.DeleteFunc(in.fresh, func(k *keyState) bool { return k.retired.Load() })
		in.bound = 2 * len(in.fresh)
	}
	in.fresh = append(in.fresh, k)
}

// wake asks that k, if parked, be looked at by the next round. Safe for
// concurrent use; a decision calls it once per park at most: on the
// first request offered to a key parked while quiet, on a refusal or a
// failure. (A key parked while busy, looked at the next round anyway,
// is not marked parked: see rests.)
func (l *Limiter) wake(k *keyState) {
	if k.parked.Load() && k.parked.CompareAndSwap(true, false) {
		l.inbox.mu.Lock()
		l.inbox.woken = append(l.inbox.woken, k)
		l.inbox.mu.Unlock()
	}
}

// unpark has the next round look at k. Sync loop only.
func (l *Limiter) unpark(k *keyState) {
	k.parkAt = 0
	k.parked.Store(false)
	w := &l.syncs.walk
	if i := int(k.walkIdx); i < len(w.entries) && w.entries[i].k == k {
		w.entries[i].until = 0
	}
}

// park has the walk pass over k until k.parkAt (see rests). k.parked is
// set before rests looks, so that an event after the look wakes it.
// Sync loop only.
func (l *Limiter) park(k *keyState) {
	w := &l.syncs.walk
	if i := int(k.walkIdx); i < len(w.entries) && w.entries[i].k == k {
		w.entries[i].until = k.parkAt
	}
}

// takeInbox adds the keys made since the last round to the walk, and
// unparks those woken. A key woken was offered nothing from its last
// look until the last round took the inbox (its first request, or
// whatever woke it, came since: the round before would have taken it),
// so its forecast is brought to then as a quiet time: the look to come
// reads what it was offered over the last round, not over its whole
// park (parked for ten minutes, a surge read as a six-thousandth of
// itself). Sync loop only.
func (l *Limiter) takeInbox(now int64) {
	in, w := &l.inbox, &l.syncs.walk
	in.mu.Lock()
	fresh, woken := in.fresh, in.woken
	in.fresh, in.woken, in.bound = w.spare[:0], nil, 0
	in.mu.Unlock()
	for _, k := range fresh {
		k.walkIdx = int32(len(w.entries))
		w.entries = append(w.entries, walkEntry{k: k})
	}
	clear(fresh)
	w.spare = fresh[:0]
	for _, k := range woken {
		l.unpark(k)
		l.quietUntil(k, w.at)
	}
	w.at = now
}

// compact drops the entries of forgotten keys once they are a quarter of
// the walk, keeping the order. Sync loop only.
func (w *walkList) compact() {
	if w.dead < 64 || 4*w.dead < len(w.entries) {
		return
	}
	j := 0
	for _, e := range w.entries {
		if e.k == nil {
			continue
		}
		e.k.walkIdx = int32(j)
		w.entries[j] = e
		j++
	}
	clear(w.entries[j:])
	w.entries, w.dead, w.cursor = w.entries[:j], 0, 0
}

// walk calls f for each key held that the round must look at: each not
// parked, or every one if all. A key found forgotten is dropped. Sync
// loop only.
func (l *Limiter) walk(now int64, all bool, f func(k *keyState, e *walkEntry)) {
	w := &l.syncs.walk
	due := l.parkDue(now)
	for i := range w.entries {
		e := &w.entries[i]
		if e.k == nil || !all && e.until > due {
			continue
		}
		k := e.k
		if k.retired.Load() {
			e.k = nil
			w.dead++
			continue
		}
		if e.until != 0 {
			e.until = 0
			k.parked.Store(false)
		}
		f(k, e)
	}
	w.compact()
}

// parkDue is the time a park must end by to be looked at by the round
// at now: a park's end was reckoned with the margin of its time (see
// rests); looked at as much sooner as the round trip and the loop's lag
// are now, a key whose loop has since run late still syncs before its
// lease lapses. Sync loop only.
func (l *Limiter) parkDue(now int64) int64 { return now + l.syncs.rtt + l.syncs.pace.lag }

// restCandidates appends to batch up to n parked Hybrid keys, taking
// turns through the walk: the keys the round may sync as the resting
// key synced longest ago (see restless), though the round passes over
// every parked key. It looks at 4n+64 entries at most, so that a walk
// of few parked Hybrid keys among many others (Local keys, parked until
// the next sweep) is not read whole each round. Sync loop only.
func (l *Limiter) restCandidates(batch []*keyState, now int64, n int) []*keyState {
	w := &l.syncs.walk
	for seen := 0; seen < min(len(w.entries), 4*n+64) && n > 0; seen++ {
		if w.cursor >= len(w.entries) {
			w.cursor = 0
		}
		e := &w.entries[w.cursor]
		w.cursor++
		if e.k == nil || e.until <= now || e.k.retired.Load() || e.k.policy().Mode != Hybrid {
			continue
		}
		batch = append(batch, e.k)
		n--
	}
	return batch
}

// collect gathers the Hybrid keys this round looks at (all of them if
// all: Close), and forgets Local and Strict keys unused for an
// IdleTimeout.
func (l *Limiter) collect(now int64, all bool) []*keyState {
	s := &l.syncs
	sweep := now-s.lastSweep >= l.idleAfter()
	if sweep {
		s.lastSweep = now
	}
	s.batch, s.owed, s.probe = s.batch[:0], s.owed[:0], nil
	t := l.policies()
	l.takeInbox(now)
	all = all || t.gen != s.walk.gen || l.degraded.Load() || l.crowded()
	s.walk.gen = t.gen
	l.walk(now, all, func(k *keyState, e *walkEntry) {
		if k.gen.Load() != t.gen {
			if l.rehome(k, t, now); k.retired.Load() {
				return
			}
		}
		switch k.policy().Mode {
		case Hybrid:
			s.batch = append(s.batch, k)
			return
		case Strict:
			if r := k.refused.Load(); r != k.refusedSeen {
				l.noteRefused(k.key, r-k.refusedSeen) // the store's refusals (decideOther)
				k.refusedSeen = r
			}
			k.roll(now, k.extra.Load())
			if l.charger != nil && k.owes() {
				s.owed = append(s.owed, k)
			}
			s.probe = k
		}
		if k.shards.Load() != nil {
			l.list(k) // put on the shards by a decision: watch for the merge
		}
		if sweep {
			l.sweepOther(k)
		}
		if k.policy().Mode == Local && !k.retired.Load() {
			// Decided by its own bucket: looked at again by the next
			// sweep, or a change of its policy (parked first: a change
			// after the look wakes it).
			k.parked.Store(true)
			if k.gen.Load() == t.gen {
				e.until = s.lastSweep + l.idleAfter()
			} else {
				k.parked.Store(false)
			}
		}
	})
	return s.batch
}
