package hybrid

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/breaker"
	"github.com/hybridlimit/hybridlimit/partition"
)

// link is a Limiter's link to one fleet: its Syncer and the circuit
// breaker in front of it.
type link struct {
	syncer fleet.Syncer
	name   string // the Config field, for errors

	mu     sync.Mutex // guards br: strict decisions report to it from any goroutine
	br     *breaker.Breaker
	closed atomic.Bool                     // br is closed: strict decisions and early syncs may call
	clean  atomic.Bool                     // br is closed with no failure counted: a success changes nothing
	okAt   atomic.Int64                    // when a call last had an answer (wall, Unix ns): see strictCut
	calls  atomic.Uint64                   // calls that reported to result, for Stats
	errors atomic.Uint64                   // of them, those that did not reach the fleet
	causes [len(errorCauses)]atomic.Uint64 // errors by cause (FleetStats.ErrorsBy)

	req      fleet.Request // the sync loop's scratch, under Limiter.syncMu
	stretch  time.Duration // how long the next probe may take, if more than SyncTimeout; under Limiter.syncMu
	answered bool          // another fleet answered the sync in progress; under Limiter.syncMu
}

// maxStretch bounds how far syncTimeout stretches SyncTimeout.
const maxStretch = 4

// syncTimeout is how long a sync with f may take: base (SyncTimeout),
// or, for a probe of an open breaker after syncs that ran out of time,
// when no other fleet has answered this sync, up to maxStretch times more. A sync on a new connection to a distant
// Redis takes three round trips (dial, handshake, the scripts), 153 ms
// at 50 ms away, and a timeout drops the connection, so at a bound of
// one 100 ms interval no sync ever finished and the node stayed Degraded
// for good. Only such probes stretch: while the breaker is closed a sync
// that hangs keeps the Failover waiting, and its first failures should
// open the breaker fast; and a probe after the Failover answered holds up
// the sync loop while the Failover's leases run out (stretching every
// sync, or every probe, made a fleet that lost Redis admit 812-878/s
// instead of 999/s of its 1,000/s over gossip). Sync loop only.
func (f *link) syncTimeout(base time.Duration) time.Duration {
	if f.closed.Load() || f.answered {
		return base
	}
	return max(base, f.stretch)
}

// timed records a sync's outcome for syncTimeout: a sync that ran out of
// time doubles the next probe's bound, one that succeeds restores base.
func (f *link) timed(base time.Duration, err error) {
	switch {
	case err == nil:
		f.stretch = 0
	case timedOut(err):
		f.stretch = min(2*max(base, f.stretch), maxStretch*base)
	}
}

// errorCauses name why a call did not reach its fleet, for
// FleetStats.ErrorsBy: it ran out of time, no connection could be made,
// or anything else (the connection lost mid-call, a cluster moving, a
// reply that could not be read).
var errorCauses = [...]string{"timeout", "connect", "other"}

// causeOf is the index in errorCauses of err's cause.
func causeOf(err error) int {
	var op *net.OpError
	switch {
	case timedOut(err):
		return 0
	case errors.As(err, &op) && op.Op == "dial":
		return 1
	}
	return 2
}

// timedOut reports whether err says a call ran out of time: its context's
// deadline, or a socket's (go-redis sets the connection's deadline from
// the context's, and reports an i/o timeout).
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func newFleet(s fleet.Syncer, name string, cfg partition.BreakerConfig) *link {
	br, _ := breaker.New(cfg) // validated by Config.withDefaults
	f := &link{syncer: s, name: name, br: br}
	f.closed.Store(true)
	f.clean.Store(true)
	return f
}

// allow reports whether the fleet may be called at now. Only a regular
// sync may probe a breaker that is not closed.
func (f *link) allow(now time.Time, probe bool) bool {
	if !probe {
		return f.closed.Load()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.br.Allow(now)
}

// result records a call's outcome. A mistake in the request, or a key
// whose state in the store is corrupt, is no sign of an outage: the
// fleet answered.
func (f *link) result(now time.Time, err error) {
	ok := err == nil || errors.Is(err, fleet.ErrInvalid) || errors.Is(err, fleet.ErrCorrupt)
	f.calls.Add(1)
	if !ok {
		f.errors.Add(1)
		f.causes[causeOf(err)].Add(1)
	}
	if ok && f.okAt.Load() < now.UnixNano() {
		f.okAt.Store(now.UnixNano())
	}
	if ok && f.clean.Load() {
		return // the common case, without the lock every Strict decision would share
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ok {
		f.br.Success()
	} else {
		f.br.Failure(now)
	}
	closed := f.br.State(now) == breaker.Closed
	f.closed.Store(closed)
	f.clean.Store(closed && ok)
}

// state is f's breaker's state at now, by name.
func (f *link) state(now time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.br.State(now).String()
}

// errOpen is what a sync returns for a fleet it did not call.
func (f *link) errOpen() error {
	return fmt.Errorf("hybrid: Config.%s's circuit breaker is open: %w", f.name, fleet.ErrUnreachable)
}

// request is f's request scratch, emptied and addressed from this node.
func (l *Limiter) request(f *link) *fleet.Request {
	req := &f.req
	req.Node, req.Interval, req.Shares, req.Fallback = l.cfg.Node, l.cfg.Interval, l.cfg.Shares, l.fallback
	req.Keys = req.Keys[:0]
	return req
}

// sync sends req to f, and checks that it answered every key.
func (f *link) sync(ctx context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp, err := f.syncer.Sync(ctx, req)
	if err == nil && len(resp.Grants) != len(req.Keys) {
		err = fmt.Errorf("hybrid: Config.%s returned %d grants for %d keys", f.name, len(resp.Grants), len(req.Keys))
	}
	return resp, err
}

// call syncs batch with f, reporting what f has not been told of yet.
func (l *Limiter) call(ctx context.Context, f *link, i int, batch []*keyState, marks []mark) (*fleet.Response, error) {
	if i == 0 && l.ldir != nil {
		return l.callLeases(ctx, f, batch, marks)
	}
	req, now := l.request(f), l.now()
	for j, k := range batch {
		u := fleet.Usage{Key: k.key, Limit: k.policy().limit, Consumed: k.unreported(i, marks[j].s0), Demand: k.requested, Paced: k.paced(), Hold: l.holdOf(k, now)}
		u.Series, u.Total = k.seriesOf(l.syncs.rng, marks[j].s0)
		req.Keys = append(req.Keys, u)
	}
	ctx, cancel := context.WithTimeout(ctx, f.syncTimeout(l.cfg.SyncTimeout))
	resp, err := f.sync(ctx, req)
	cancel()
	if err == nil {
		for j := range resp.Grants {
			if g := &resp.Grants[j]; g.Shards > 0 {
				// Only Config.Syncer's shards are followed (callLeases).
				g.Err = fmt.Errorf("hybrid: Config.%s split key %q into shards, which only Config.Syncer may do", f.name, batch[j].key)
			}
		}
	}
	return resp, err
}

// health follows the Limiter's contact with its fleet, on the Limiter's
// clock.
type health struct {
	mu       sync.Mutex
	cutSince int64 // when the node was last in touch with the whole fleet, if it is cut off now
	cut      bool
	restored int64 // when the node was last back in touch
}

// reached records a sync that reached the whole fleet at now.
func (l *Limiter) reached(now int64) {
	h := &l.health
	h.mu.Lock()
	if h.cut {
		h.cut, h.restored = false, now
	}
	h.cutSince = now
	h.mu.Unlock()
	l.factor.Store(math.Float64bits(1))
}

// cutOff records a sync at now that reached no fleet, or, with since
// set, one that reached a side of a split that began at since.
func (l *Limiter) cutOff(now int64, since int64, partial bool) {
	h := &l.health
	h.mu.Lock()
	if partial {
		h.cutSince = since
	}
	h.cut = true
	cut := now - h.cutSince
	h.mu.Unlock()
	l.factor.Store(math.Float64bits(l.ladder.Factor(time.Duration(cut))))
}

// Health reports the Limiter's link to its fleet now: its level, how long
// it has been at it, the ladder's factor in force, and how late its sync
// loop runs. It is partition.Healthy while the last sync reached the
// fleet; Degraded and then Emergency while the node is cut off, or on the
// minority side of a split, with the ladder's factor in force. A part of
// the fleet down while the rest answers (a Redis Cluster master) leaves
// it Healthy, with FailingKeys counting that part's keys and a KeyError
// wrapping fleet.ErrUnreachable. A node in touch with its fleet that refused a request
// under the limit for lateness (its lease spent while its loop ran more
// than a quarter Interval late, as a loop starved of CPU does) within
// the last 20 Intervals is Degraded, with the factor at 1, since its
// first such refusal. A Limiter with no Syncer is always Healthy.
func (l *Limiter) Health() partition.Health {
	now := l.now()
	h := &l.health
	h.mu.Lock()
	defer h.mu.Unlock()
	var out partition.Health
	if h.cut {
		out = l.ladder.Health(time.Duration(max(1, now-h.cutSince)), 0)
	} else {
		out = l.ladder.Health(0, time.Duration(now-h.restored))
	}
	// A node refusing for lateness is not Healthy, though its fleet
	// answers: it refuses what its leases would cover if its loop kept
	// time (see lateRound).
	late, since, refusing := l.lateHealth(now)
	out.Late = late
	if refusing && out.Level == partition.Healthy {
		out.Level, out.Since = partition.Degraded, time.Duration(now-since)
	}
	out.FailingKeys = int(l.keyErrs.failing.Load())
	out.KeyError = l.lastKeyError()
	return out
}

// anyClosed reports whether some fleet's breaker is closed: an early sync
// calls no other.
func (l *Limiter) anyClosed() bool {
	for _, f := range l.fleets {
		if f.closed.Load() {
			return true
		}
	}
	return false
}

// wall converts the Limiter's time to a wall time, for the breakers.
func (l *Limiter) wall(t int64) time.Time { return l.epoch.Add(time.Duration(t)) }
