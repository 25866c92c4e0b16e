package hybrid

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
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
	if s.chunk == 0 {
		s.chunk = firstChunk
	}
	batch, cut := l.splitCut(now, batch, how)
	if len(batch) > s.chunk {
		// The keys that most need a sync first: those that refused or
		// ran dry since their last sync, then those offered traffic,
		// then the rest; each group the longest unsynced first. A
		// tenant in use beside 12,000 one-off keys is synced every
		// round (it was refused 78 times in 178 when the round went by
		// age alone), the one-off keys in turn until they hand back.
		byAge := func(a, b *keyState) int { return cmp.Compare(a.lastSync, b.lastSync) }
		from := 0
		for _, urgent := range []func(*keyState) bool{(*keyState).starved, (*keyState).used} {
			to := from
			for i := from; i < len(batch); i++ {
				if urgent(batch[i]) {
					batch[to], batch[i] = batch[i], batch[to]
					to++
				}
			}
			slices.SortFunc(batch[from:to], byAge)
			from = to
		}
		slices.SortFunc(batch[from:], byAge)
	}
	end := now + int64(budget)
	for i := 0; i < len(batch); {
		t := l.now()
		if i > 0 && t >= end {
			l.noteDeferred(len(batch)-i, len(batch))
			return nil
		}
		n := min(s.chunk, len(batch)-i)
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

// lateRound records when a regular round starts, and how long since the
// last if that round left keys over and this one starts more than a
// quarter Interval late (past the loop's jitter of a tenth): leases are
// then sized for that gap (see horizon), at most 4 Intervals, so that
// the keys synced every round do not run dry between rounds that take
// longer than Interval. Otherwise it is 0: sizing leases for the
// jitter, or for a loop merely slowed by a loaded machine, raised the
// simulator's worst window (steady, Redis, 4 nodes, 100 ms) from 6.20%
// to 6.85% and took TestLeaseShardsFleetWide past its bound under load.
func (l *Limiter) lateRound(now int64) {
	s := &l.syncs
	s.roundGap = 0
	if gap := now - s.lastRound; s.deferred > 0 && s.lastRound > 0 && gap > int64(l.cfg.Interval)*5/4 {
		s.roundGap = min(gap, 4*int64(l.cfg.Interval))
	}
	s.lastRound = now
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

// starved reports whether k refused a request, or has nothing left to
// spend, since its last forecast. Sync loop only.
func (k *keyState) starved() bool {
	return k.refused.Load() != k.refusedSeen || k.allowance() == 0
}

// used reports whether k was offered traffic since its last forecast.
// Sync loop only.
func (k *keyState) used() bool {
	return k.spent() != k.spentSeen || k.refused.Load() != k.refusedSeen
}
