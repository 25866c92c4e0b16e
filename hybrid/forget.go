package hybrid

// A Hybrid key is forgotten once it has gone without requests for a
// while (it is idle) and the fleet has taken back its lease: the sync
// that finds it idle asks for nothing, the grant of nothing comes back,
// and settle forgets it, its consumption all reported. Local and Strict
// keys, which hold no lease, are forgotten by a sweep.
//
// How long "a while" is follows how full the table is. With room to
// spare it is Config.IdleTimeout, so that a key used now and then keeps
// its lease and its forecast. Past three quarters of MaxKeys it is two
// Intervals: a client that sends each request under a new key (a
// rotating API key, a scan of user IDs) would otherwise fill the table
// with keys it never uses again, each kept for IdleTimeout, and every
// other client's new keys would fail ErrTooManyKeys until they aged out
// (2,000 keys filled by such a flood refused 50 of a tenant's 60 new keys
// over 3 s). Forgetting is still done by a sync, so no key's count is
// lost: the table holds what a flood brings in over a few Intervals, and
// sizing MaxKeys above that keeps the flood from locking anyone out.
// A key forgotten so and seen again would start afresh, with a new
// starter credit (its part of the burst, spent before its first grant):
// a client keeping the table crowded with a flood could burst on its own
// key every few Intervals and spend the credit each time (bursts every
// 300 ms took 826 in 3 s from a bucket that holds 400), so while crowded
// a new key's credit is the floor.
//
// A node cut off from its fleet cannot hand leases back, and so would
// keep every key it has seen until the fleet returns. A key idle for two
// Windows (and an Interval) is forgotten then without it: what it spent
// is older than the previous window, which the fleet's count has rolled
// past, and which the node would not report anyway (forgetStale).

// idleAfter is how long, in the Limiter's time, a key goes without
// requests before it is idle: IdleTimeout, or two Intervals while the
// table holds more than three quarters of MaxKeys.
func (l *Limiter) idleAfter() int64 {
	if l.crowded() {
		return int64(2 * l.cfg.Interval)
	}
	return int64(l.cfg.IdleTimeout)
}

// crowded reports whether the table holds more than three quarters of
// MaxKeys: keys are then forgotten after two Intervals idle. It notes
// when it last was, for wasCrowded.
func (l *Limiter) crowded() bool {
	if l.keys.Len() <= l.cfg.MaxKeys/4*3 {
		return false
	}
	if now := l.now(); now > l.crowdedAt.Load() {
		l.crowdedAt.Store(now)
	}
	return true
}

// wasCrowded reports whether the table has been crowded within the last
// IdleTimeout, when a key seen now may be one forgotten for being idle
// two Intervals: a new key then gets no more than the floor as its
// starter credit (see allowNew). A flood makes the table crowded and
// empties it by turns, so that it is often not crowded when the key
// comes back.
func (l *Limiter) wasCrowded() bool {
	at := l.crowdedAt.Load()
	return at != 0 && l.now()-at < int64(l.cfg.IdleTimeout) || l.crowded()
}

// forget removes k; a caller still holding it sees it retired and looks
// the key up again. Under syncMu.
func (l *Limiter) forget(k *keyState) {
	k.retired.Store(true)
	l.unpark(k) // the walk drops it at its next round, not at its park's end
	if l.keys.CompareAndDelete(k) {
		l.wanted.Delete(k.key)
		l.rounds.forgotten.Add(1)
		l.keyForgotten(k)
		k.resetFallback() // sized to its own limit, local would keep it
	}
}

// forgetCutOff forgets k, a Hybrid key the last sync could not report
// to any fleet, if it has been idle for long enough that what it spent
// no longer counts anywhere: two of its Windows and an Interval.
func (l *Limiter) forgetCutOff(k *keyState, now int64) {
	if k.idle && now-k.activeAt > int64(2*k.policy().Window+l.cfg.Interval) {
		l.forget(k)
	}
}

// sweepOther forgets a Local or Strict key unused since the last sweep,
// and starts a new period for one that was used.
func (l *Limiter) sweepOther(k *keyState) {
	if !k.touched.Load() && (k.policy().Mode != Strict || l.charger == nil || !k.owes()) {
		l.forget(k)
		return
	}
	k.touched.Store(false)
}

// makeRoom forgets keys that are idle, at most once per Interval, and
// reports whether there is room for a new key.
func (l *Limiter) makeRoom() bool {
	if !l.syncMu.TryLock() {
		return false
	}
	defer l.syncMu.Unlock()
	now := l.now()
	if now-l.syncs.lastRoom >= int64(l.cfg.Interval) {
		l.syncs.lastRoom = now
		l.keys.Range(func(k *keyState) bool {
			if k.policy().Mode != Hybrid {
				l.sweepOther(k)
			} else if k.allReported(len(l.fleets), k.spent()) && k.allowance() == 0 && k.hasGrant.Load() && k.lease == 0 {
				l.forget(k)
			}
			return true
		})
	}
	return l.keys.Len() < l.cfg.MaxKeys
}
