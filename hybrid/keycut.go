package hybrid

import (
	"context"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// A Syncer whose store is in parts, a Redis Cluster, can lose one part
// while the others answer: then the keys of the lost part come back with
// a Grant.Err that wraps fleet.ErrUnreachable, and the others with their
// grants. That is no outage of the node, which stays Healthy, nor a
// breaker failure: the fleet answered. Each cut-off key instead does
// alone what every key does on a node cut off from its fleet: it keeps
// its lease until the lease lapses, then follows its FailMode, a
// FailStatic key from a fallback bucket sized by the ladder for how long
// that key has gone unanswered (cutFactor), and what it spends is
// reported once its part of the store answers again. Health counts such
// keys in FailingKeys, with a KeyError that wraps fleet.ErrUnreachable.
// They are synced apart from the others, every cutRetry Intervals (see
// splitCut and syncCut), so that the dead part's wait does not delay the
// others' grants. The hot path is unchanged; a key carries 16 bytes more
// (cutFactor, answeredAt).

// cutBit marks keyState.cutFactor as set: a factor's own sign bit is
// always clear, and a factor of 0 is a factor all the same.
const cutBit = 1 << 63

// keyCut records that the sync at now could not reach k's part of the
// fleet while other parts answered. Sync loop only.
func (l *Limiter) keyCut(k *keyState, now int64) {
	f := math.Float64bits(l.ladder.Factor(time.Duration(now - k.answeredAt)))
	if k.cutFactor.Load() != f|cutBit {
		k.cutFactor.Store(f | cutBit)
	}
	// An early sync would wait on the same dead part, holding up the
	// early refills of the keys that share its batch.
	k.low.Store(0)
	if k.hasGrant.Load() && now > k.expires {
		k.zero() // a lapsed lease is not spent
	}
}

// keyReached records that the fleet answered k at now. Sync loop only.
func (k *keyState) keyReached(now int64) {
	k.answeredAt = now
	if k.cutFactor.Load() != 0 {
		k.cutFactor.Store(0)
	}
}

// factorFor is the ladder's factor k's fallback bucket is sized by, as
// float64 bits: the node's, or k's own if k alone has been cut off for
// longer.
func (l *Limiter) factorFor(k *keyState) uint64 {
	f := l.factor.Load()
	if c := k.cutFactor.Load(); c != 0 && c&^cutBit < f {
		return c &^ cutBit // the bits of factors, which are not negative, order as they do
	}
	return f
}

// cutRetry is how many Intervals apart a key cut off alone is synced
// again, to learn whether its part of the fleet is back: each such call
// waits up to SyncTimeout on the dead part, holding up the sync loop.
const cutRetry = 10

// splitCut moves the keys of batch cut off alone (see keyCut) to its end,
// and returns the others, and those of the cut keys due for a retry:
// all of them when closing, else those synced cutRetry Intervals ago or
// more. The rest step down the ladder meanwhile. If no key of batch is
// answered, there is no rest of the fleet to set the cut keys apart
// from: all of batch is returned, as one. Sync loop only.
func (l *Limiter) splitCut(now int64, batch []*keyState, how syncKind) (live, cut []*keyState) {
	n := 0
	for i, k := range batch {
		if k.cutFactor.Load() == 0 {
			batch[n], batch[i] = batch[i], batch[n]
			n++
		}
	}
	if n == 0 {
		return batch, nil
	}
	live, rest := batch[:n], batch[n:]
	m := 0
	for i, k := range rest {
		if how == closing || now-k.lastSync >= cutRetry*int64(l.cfg.Interval) {
			rest[m], rest[i] = rest[i], rest[m]
			m++
		} else {
			l.keyCut(k, now)
		}
	}
	return live, rest[:m]
}

// syncCut syncs cut, keys cut off alone, after the rest of the round
// reached the fleet, in calls of their own, so that the other keys'
// grants are not held up while a call waits on a dead part of the fleet
// (a Cluster master killed: SyncTimeout, 100 ms a round at the defaults).
// Such a call is a probe, and waits at most 8 of the fleet's round trips
// (no less than the early-sync gap (earlyGap)), enough for a new connection and a script's
// first load: the sync loop, early syncs included, waits on it. A call
// that reaches none of them is no outage of the node, nor a breaker's
// failure: each key stays cut off. Sync loop only.
func (l *Limiter) syncCut(ctx context.Context, cut []*keyState, how syncKind) error {
	if len(cut) == 0 {
		return nil
	}
	s := &l.syncs
	s.cutOnly = true
	defer func() { s.cutOnly = false }()
	if how != closing { // closing is the last chance: SyncTimeout
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, min(l.cfg.SyncTimeout, max(8*time.Duration(s.rtt), time.Duration(l.earlyGap()))))
		defer cancel()
	}
	for i := 0; i < len(cut); i += s.chunk {
		if err := l.syncBatch(ctx, l.now(), cut[i:min(len(cut), i+s.chunk)], how); err != nil {
			return err
		}
	}
	return nil
}

// cutResponse answers every key of a call that reached no part of the
// fleet with err, as keys cut off alone.
func cutResponse(keys int, err error) *fleet.Response {
	resp := &fleet.Response{Grants: make([]fleet.Grant, keys)}
	for i := range resp.Grants {
		resp.Grants[i].Err = err
	}
	return resp
}

// unreached handles a sync that reached no fleet: decisions past the
// lease follow the FailMode, scaled by the ladder, and a lease that has
// lapsed is not spent.
func (l *Limiter) unreached(now int64, batch []*keyState) {
	l.cutOff(now, 0, false)
	l.degraded.Store(true)
	for _, k := range batch {
		k.early.Store(false)
		if k.hasGrant.Load() && now > k.expires {
			k.zero()
		}
		l.forgetCutOff(k, now)
	}
}
