package hybrid

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
)

// Local and Strict decisions: the modes that hold no lease.

// AllowNContext is AllowN with a context for the one decision that waits
// on the network: a Strict policy's call to the store, which then ends
// when ctx does as well as at Config.StrictTimeout. Hybrid and Local
// decisions never wait and do not read ctx.
//
// If ctx ends before the store answers a Strict decision, the Decision
// refuses and the error is ctx's (errors.Is(err, context.Canceled) or
// context.DeadlineExceeded); the fleet is not counted as failing for it,
// and the request may or may not have been charged. A ctx already done
// decides nothing, as for WaitN.
func (l *Limiter) AllowNContext(ctx context.Context, key string, n int) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return refusedDecision(l.cfg.Interval), err
	}
	if l.localPolicy(key) != nil {
		return l.allow(key, noTime, int64(n))
	}
	k, err := l.state(key)
	if err != nil {
		return l.errDecision(err), err
	}
	if k.policy().Mode != Strict {
		return l.decide(k, noTime, int64(n))
	}
	return l.decideOther(ctx, k, noTime, int64(n))
}

// ended returns ctx's error if it has ended, or is at its deadline: the
// store's client sets the connection's deadline from ctx's, and its read
// may time out a moment before ctx says it is done (when only ctx.Err
// was read, 3 runs of TestStrictContext in 10 counted such a call as the
// fleet failing).
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// decideOther decides for Local and Strict keys. A Strict decision's
// call to the store ends at StrictTimeout or when parent ends; a parent
// that ended is the caller's doing, not the fleet's: the Decision
// refuses with parent's error, and no failure is counted.
func (l *Limiter) decideOther(parent context.Context, k *keyState, now, n int64) (Decision, error) {
	d, err := l.decideStore(parent, k, now, n)
	if err != nil {
		return d, err
	}
	return shadowed(k.policy(), d, n), nil
}

// decideStore is decideOther but for Shadow policies.
func (l *Limiter) decideStore(parent context.Context, k *keyState, now, n int64) (Decision, error) {
	if !k.touched.Load() {
		k.touched.Store(true)
	}
	p := k.policy()
	if p.Mode == Local {
		return l.allowLocal(p, k.key, now, n)
	}
	if n <= 0 {
		return makeDecision(p.capacity, 0, 0, 0, false), nil
	}
	f := l.fleets[0]
	if !f.closed.Load() || l.closed.Load() {
		// The breaker is open: a dead store is not waited on; the sync
		// loop probes it (chargeStrict). A closed Limiter calls it no
		// more.
		if now == noTime {
			now = l.now()
		}
		return l.failed(k, now, n), nil
	}
	if t := l.now(); t < k.until.Load() {
		return l.failed(k, t, n), nil // its part of the store is down (strictCut)
	}
	if l.hot != nil {
		l.hot.Observe(k.key)
	}
	ctx, cancel := context.WithTimeout(parent, l.cfg.StrictTimeout)
	var g store.Decision
	var err error
	if tr := l.cfg.Tracer; tr != nil {
		var end func(error)
		ctx, end = tr.Start(ctx, "strict", p.Name, int(n))
		defer func() { endSpan(end, err) }()
	}
	set := k.shards.Load()
	if set != nil && l.now() < k.shardUntil.Load() {
		g, err = l.decideSharded(ctx, k, set, n)
	} else {
		// Not split, or the split this node knows of is due to be
		// confirmed: the key itself answers with the fleet's mark if it
		// stands.
		g, err = l.strict.Allow(ctx, k.key, p.limit, n)
		switch {
		case err == nil && g.Shards > 0:
			g, err = l.decideSharded(ctx, k, k.adopt(g, l.now(), l.cfg.Interval), n)
		case err == nil && set != nil:
			// The mark is gone: every node is back on the key. The
			// charge is the fleet's, not the caller's: a caller that
			// gives up must not leave the key a fresh bucket beside what
			// its shards spent (chargeKey bounds it by StrictTimeout).
			l.mergeShards(context.WithoutCancel(parent), k, set)
		}
	}
	cancel()
	if err != nil {
		if err := ended(parent); err != nil {
			// Whether the store would have answered in StrictTimeout is
			// not known: the sync loop probes it itself (chargeStrict),
			// so that callers whose contexts are shorter than the store
			// is slow still open the breaker on a store that hangs.
			l.unsure.Store(true)
			return refusedDecision(l.cfg.Interval), err
		}
	}
	if now == noTime {
		now = l.now()
	}
	if l.strictCut(f, k, now, err) {
		return l.failed(k, now, n), nil
	}
	f.result(l.wall(now), err)
	switch {
	case err == nil:
		k.resetFallback()
		l.keyAnswered(k)
		if n > 0 && g.Allowed {
			p.counts.admitted.Add(n)
		} else if n > 0 {
			why := byLimit
			if n > p.capacity {
				why = byCost
			}
			p.countRefused(uint64(n), why)
			k.refused.Add(uint64(n)) // for the most-refused keys (noteRefused)
		}
		var retry time.Duration
		switch {
		case g.Allowed:
		case g.RetryAfter > 0: // local.Never included
			retry = g.RetryAfter
		default:
			// Refused with no time to wait: not an answer the store's
			// scripts give, but a refusal all the same.
			retry = l.retryAfter(now)
		}
		return makeDecision(p.capacity, max(0, g.Remaining), retry, max(0, g.ResetAfter), false), nil
	case errors.Is(err, fleet.ErrInvalid) || errors.Is(err, fleet.ErrCorrupt):
		// The store answered but not for this key: it follows the
		// FailMode like an outage, and Health counts it.
		l.keyFailed(k, err)
	}
	return l.failed(k, now, n), nil
}

// strictCut reports whether err, a Strict decision's, says that k's
// part of the store is down while the rest answers: a Cluster master
// dead, its key's call unreachable, while f answered another call (a
// decision on a live master's key, a sync) within the last two
// Intervals. Such a key follows its FailMode alone, as a Hybrid key cut
// off alone does (keycut.go): no failure is counted on the breaker,
// which every other key's decisions and the syncs share (three in a row
// opened it, and every Strict key on the node, those on live masters
// included, followed its FailMode: 4,230 of 4,390 decisions in
// TestStrictKeysOnDeadMaster; 0 of 5,083 now), Health counts the key,
// and the store is not called for it for two Intervals, so that its
// requests do not each
// wait out StrictTimeout. Its FailStatic bucket keeps the node's whole
// share: no node can decide the key in the store meanwhile, so the
// shares still bound the fleet. When the whole store goes down, its
// keys' first failures within two Intervals of its last answer are
// taken so too: the breaker opens that much later, and each key is
// tried again two Intervals on. A Strict key holds no lease, so k.until
// says until when the store is not called for it.
func (l *Limiter) strictCut(f *link, k *keyState, now int64, err error) bool {
	if !errors.Is(err, fleet.ErrUnreachable) || l.wall(now).UnixNano()-f.okAt.Load() > 2*int64(l.cfg.Interval) {
		return false
	}
	k.until.Store(now + 2*int64(l.cfg.Interval))
	l.keyFailed(k, err)
	return true
}

// localPolicy returns key's policy if it is a Local one and the Limiter
// tells policies by prefix (no Config.Resolve); nil otherwise. Such a
// key is never put in the key table: its policy's local.Limiter holds
// it, so a decision looks it up once, not twice (at 100,000 keys in
// random order a Local policy's Allow took 2.4-3 times local.Limiter's,
// mostly in the second lookup's cache misses). The prefix scan costs a
// Hybrid key a few nanoseconds, and only when some policy is Local.
func (l *Limiter) localPolicy(key string) *policy {
	t := l.policies()
	if !t.localFirst {
		return nil
	}
	for _, p := range t.list {
		if strings.HasPrefix(key, p.Prefix) {
			if p.Mode == Local {
				return p
			}
			return nil
		}
	}
	return nil
}

// allowLocal decides n requests for key, whose policy p is Local.
func (l *Limiter) allowLocal(p *policy, key string, now, n int64) (Decision, error) {
	if len(key) > l.cfg.MaxKeyLen {
		return l.errDecision(ErrKeyTooLong), ErrKeyTooLong
	}
	var r local.Decision
	var err error
	if now == noTime {
		r, err = p.local.AllowN(key, int(n))
	} else {
		r, err = p.local.AllowNAt(key, l.epoch.Add(time.Duration(now)), int(n))
	}
	if err = localErr(err); err != nil {
		return l.errDecision(err), err
	}
	return shadowed(p, r, n), nil
}

// localErr is err, from a Local policy's local.Limiter, as the Limiter
// returns it: a full local.Limiter's error is also ErrTooManyKeys, which
// callers (httplimit: 503, not 500) test for whatever the policy's mode.
// Every path that asks a local.Limiter (Allow, ReserveN, TakeN, WaitN)
// passes its error through here.
func localErr(err error) error {
	if errors.Is(err, local.ErrTooManyKeys) && !errors.Is(err, ErrTooManyKeys) {
		return fmt.Errorf("%w: %w", ErrTooManyKeys, err)
	}
	return err
}
