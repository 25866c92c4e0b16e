package local

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
)

// ErrKeyTooLong is returned for a key longer than Config.MaxKeyLen. Such a
// request is neither admitted nor counted; shorten or hash the key.
var ErrKeyTooLong = errors.New("local: key longer than Config.MaxKeyLen")

// ErrTooManyKeys is returned for a new key when the Limiter already holds
// Config.MaxKeys keys and none of them is idle. Forgetting a key that has
// spent something would hand it a fresh bucket, so a full Limiter refuses
// the new key instead; the request is neither admitted nor counted. Raise
// MaxKeys, Delete keys, or retry after the Decision's RetryAfter, when the
// first held key will be idle.
var ErrTooManyKeys = errors.New("local: Config.MaxKeys keys are held and none is idle; raise MaxKeys or Delete keys")

// A Limiter rate-limits many keys independently, each with its own bucket
// of the configured algorithm, in this process alone.
//
// Deciding for a key that already exists takes no lock and allocates
// nothing. Idle keys, which would decide exactly as new ones, are removed
// by Sweep and when MaxKeys would be passed; a key that has spent anything
// is kept, and a new key that finds no room gets ErrTooManyKeys.
//
// A Limiter is safe for concurrent use. It starts no goroutines, so it
// needs no Close.
type Limiter struct {
	cfg   Config
	p     atomic.Pointer[params] // the configured parameters, shared by every key not resized
	epoch time.Time              // the clock's Now and Nanotime at New, read together
	mono  int64
	keys  keyMap

	highWater atomic.Int64 // latest time seen, to within a millisecond
}

// New returns a Limiter for cfg, or an error naming the first field of cfg
// that is out of range.
func New(cfg Config) (*Limiter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, cfgerr.Wrap(ErrInvalidConfig, err)
	}
	l := &Limiter{
		cfg:   cfg,
		epoch: cfg.Clock.Now(),
		mono:  cfg.Clock.Nanotime(),
	}
	l.p.Store(newParams(cfg.Algorithm, cfg.Limit, cfg.Window, cfg.Burst))
	l.keys.init(cfg.MaxKeys)
	return l, nil
}

// Config returns the configuration the Limiter was built with, defaults
// filled in.
func (l *Limiter) Config() Config { return l.cfg }

// Allow reports whether one request for key may happen now.
// It is shorthand for AllowN(key, 1).
func (l *Limiter) Allow(key string) (Decision, error) {
	return l.allowN(key, l.since(l.cfg.Clock.Nanotime()), 1)
}

// AllowN reports whether n requests for key may happen now, and if so
// counts them. See AllowNAt.
func (l *Limiter) AllowN(key string, n int) (Decision, error) {
	return l.allowN(key, l.since(l.cfg.Clock.Nanotime()), int64(n))
}

// AllowNAt reports whether n requests for key may happen at time t, and if
// so counts them. Either all n are admitted or none is.
//
// A cost n larger than the bucket can ever hold is refused with RetryAfter
// set to Never. A cost n <= 0 admits nothing and counts nothing: it reports
// the key's state, as admitted.
//
// Times earlier than ones already seen count as no time passing: a clock
// going backwards never refills a bucket. A time before the Limiter's
// high-water mark, which trails the latest time it has seen by at most
// about a millisecond, is taken as that mark. Between the mark and the
// latest time each algorithm keeps its own order: the fixed window decides
// in the latest window the key counted in, the log at the latest time it
// saw, and the token bucket and the sliding window counter at t itself,
// which can only be stricter than at the later time. A new key, and one
// created by SetLimit, is full at any time.
//
// An error comes with a refusing Decision: ErrKeyTooLong, and
// ErrTooManyKeys for a new key when MaxKeys keys are held and none is
// idle, whose RetryAfter is when the first of them may be.
func (l *Limiter) AllowNAt(key string, t time.Time, n int) (Decision, error) {
	return l.allowN(key, l.nanos(t), int64(n))
}

func (l *Limiter) allowN(key string, now, n int64) (Decision, error) {
	if len(key) > l.cfg.MaxKeyLen {
		return l.refusal(Never), ErrKeyTooLong
	}
	now = l.monotone(now)
	cost := max(n, 0)
	h := hashKey(key)
	// The fast path: an existing key, found with atomic loads only.
	if e := l.keys.shardFor(h).tab.Load().lookup(h, key); e != nil {
		if b := e.b.Load(); b != nil {
			if b.p.alg == TokenBucket { // the common case, one call shallower
				if tat, allowed, ok := b.gcra(now, cost); ok {
					return b.p.gcraResult(tat, now, cost, allowed), nil
				}
			} else if r, ok := b.take(now, cost); ok {
				return r, nil
			}
		}
	}
	return l.allowSlow(h, key, now, cost)
}

// allowSlow decides for a new key or a retired bucket.
func (l *Limiter) allowSlow(h uint64, key string, now, cost int64) (Decision, error) {
	e := l.keys.shardFor(h).tab.Load().lookup(h, key)
	for {
		created := false
		if e == nil {
			var err error
			if e, created, err = l.keys.insert(h, key, l); err != nil {
				return l.tooMany(now), err
			}
		}
		b := e.b.Load()
		if b == nil {
			// Swept since we found it. A sweep makes every later decision
			// happen no earlier than it did, so decide at that time too.
			e, now = nil, l.monotone(now)
			continue
		}
		if r, ok := b.take(now, cost); ok {
			if created {
				l.keys.noteIdle(h, b.idleAt(now))
			}
			return r, nil
		}
		// Retired under us: a resize is publishing a new bucket, or the
		// key is being removed. Either takes nanoseconds.
		if e.b.Load() == b {
			runtime.Gosched()
		}
	}
}

// refusal is the Decision that comes with an error: nothing admitted, and
// retry after the given time.
func (l *Limiter) refusal(retry time.Duration) Decision {
	return Decision{limit: l.p.Load().burst, retryAfter: retry}
}

// tooMany is the refusal that comes with ErrTooManyKeys: retry when the
// first key held may be idle, and so make room.
func (l *Limiter) tooMany(now int64) Decision {
	next := l.keys.nextIdle()
	if next == math.MaxInt64 {
		return l.refusal(Never) // only keys with their own limits: Delete makes room
	}
	return l.refusal(time.Duration(max(next-now, 1)))
}

// since converts a reading of the clock's Nanotime to nanoseconds since
// the Limiter's epoch.
func (l *Limiter) since(mono int64) int64 { return clampNanos(mono - l.mono) }

// nanos converts t to nanoseconds since the Limiter's epoch. Real clock
// times carry a monotonic reading, so wall-clock jumps do not show here.
func (l *Limiter) nanos(t time.Time) int64 { return clampNanos(int64(t.Sub(l.epoch))) }

// now is the current time in nanoseconds since the epoch.
func (l *Limiter) now() int64 { return l.monotone(l.since(l.cfg.Clock.Nanotime())) }

// clampNanos keeps bucket arithmetic far from overflow.
func clampNanos(d int64) int64 {
	const lim = 1 << 61
	return min(max(d, -lim), lim)
}

// monotone returns now, or the latest time seen (to within about a
// millisecond) if now is earlier.
//
// A manual clock, or times passed to the *At methods, can go backwards.
// Clamping to the high-water mark makes a large step back count as no
// time passing, which each bucket then handles exactly for the small steps
// left. The mark is written at most once a millisecond, so cores deciding
// in parallel share it read-mostly.
func (l *Limiter) monotone(now int64) int64 {
	hw := l.highWater.Load()
	if now < hw {
		return hw
	}
	if now-hw > maxLag {
		l.highWater.Store(now)
	}
	return now
}

// maxLag is how far the high-water mark may trail the latest time seen,
// about a millisecond.
const maxLag = 1 << 20

// sweepTime, retireIdle and retire make *Limiter the key map's sweeper.
//
// A sweep forgets keys that are idle at the time it reads, so it raises
// the high-water mark to exactly that time: a decision made after, even
// with an earlier time passed to AllowNAt, happens no earlier, when a
// forgotten key and a new one decide alike.
func (l *Limiter) sweepTime() int64 {
	now := l.since(l.cfg.Clock.Nanotime())
	for {
		hw := l.highWater.Load()
		if now <= hw {
			return hw
		}
		if l.highWater.CompareAndSwap(hw, now) {
			return now
		}
	}
}

// retireIdle retires e's bucket if forgetting it changes no decision: its
// state is a new bucket's, and so are its parameters. A key given its own
// limit by SetLimit is never idle, since a new bucket would have the
// configured limit instead.
func (l *Limiter) retireIdle(e *entry, now int64) (bool, int64) {
	b := e.b.Load()
	if b == nil || b.p != l.p.Load() {
		return false, math.MaxInt64
	}
	return b.retireIfIdle(now)
}

// params returns the configured parameters (see sweeper).
func (l *Limiter) params() *params { return l.p.Load() }

func (l *Limiter) retire(e *entry) {
	if b := e.b.Load(); b != nil {
		b.retire()
	}
}

// SetLimit changes key's limit and burst (window unchanged) while requests
// flow, keeping what the key has already spent: a token bucket's spent
// tokens stay spent at the new rate, window counts and log entries stay
// counted. A burst of 0 means the limit. A key not yet seen is created
// full, as a new key is: full at any time, including times earlier than
// the call. It is SetLimitAt at the clock's current time.
//
// SetLimit is how a node resizes a key's bucket to its share of a fleet
// quota. Decisions racing with it see either the old or the new bucket,
// never a mix, and none is lost.
//
// A key given a limit other than the configured one is never forgotten
// by Sweep nor to make room under MaxKeys, since a new key would decide
// with the configured limit instead; Delete it, or set it back to the
// configured limit, when done with it. Creating a key when MaxKeys keys
// are held and none is idle fails with an error wrapping ErrTooManyKeys.
func (l *Limiter) SetLimit(key string, limit, burst int64) error {
	return l.setLimit(key, l.now(), limit, burst)
}

// SetLimitAt is SetLimit at time t: a token bucket's spent tokens are
// carried over as of t. A caller that reads the clock once for a resize
// and the decisions that follow passes that time to both.
func (l *Limiter) SetLimitAt(key string, t time.Time, limit, burst int64) error {
	return l.setLimit(key, l.monotone(l.nanos(t)), limit, burst)
}

func (l *Limiter) setLimit(key string, now, limit, burst int64) error {
	if len(key) > l.cfg.MaxKeyLen {
		return ErrKeyTooLong
	}
	if burst == 0 {
		burst = limit
	}
	if err := checkLimits(l.cfg.Algorithm, limit, l.cfg.Window, burst); err != nil {
		return fmt.Errorf("SetLimit(%q): %w", key, err)
	}
	q := newParams(l.cfg.Algorithm, limit, l.cfg.Window, burst)
	conf := l.p.Load()
	if *q == *conf {
		q = conf // the configured limit: idle again once its state is
	}
	h := hashKey(key)
	for {
		done := l.keys.withEntry(h, key, func(sh *shard, e *entry) {
			nb := e.b.Load().resized(q, now)
			e.b.Store(nb)
			if q == conf {
				sh.lowerIdleLocked(nb.idleAt(now)) // a faster refill idles sooner
			}
		})
		if done {
			return nil
		}
		if _, _, err := l.keys.insert(h, key, l); err != nil {
			return fmt.Errorf("local: SetLimit(%q): %w", key, err)
		}
	}
}

// Resize changes the configured limit and burst (window and algorithm
// unchanged; a burst of 0 means the limit) while requests flow: every key
// that has no limit of its own (SetLimit) moves to it keeping what it has
// spent, as SetLimit moves one key, and keys made afterwards start under
// it. Config goes on reporting the configuration New was given. It is
// how a policy whose limit changes keeps its keys' counts.
func (l *Limiter) Resize(limit, burst int64) error {
	if burst == 0 {
		burst = limit
	}
	if err := checkLimits(l.cfg.Algorithm, limit, l.cfg.Window, burst); err != nil {
		return fmt.Errorf("local: Resize: %w", err)
	}
	q := newParams(l.cfg.Algorithm, limit, l.cfg.Window, burst)
	old := l.p.Swap(q)
	now := l.now()
	// Keys made from here on read q under their shard's lock (insert);
	// each shard's keys made before are resized under it.
	l.keys.each(func(sh *shard, e *entry) {
		if b := e.b.Load(); b != nil && b.p == old {
			nb := b.resized(q, now)
			e.b.Store(nb)
			sh.lowerIdleLocked(nb.idleAt(now))
		}
	})
	return nil
}

// Delete forgets key; its next request starts from a full bucket with the
// configured limit. It reports whether the key was present.
func (l *Limiter) Delete(key string) bool {
	return l.keys.delete(hashKey(key), key, l)
}

// Sweep removes every idle key (a full token bucket, windows that no
// longer count, a log with nothing in its window) and returns how many it
// removed. Removing an idle key loses nothing: it would decide exactly as a
// new one. A key given its own limit by SetLimit is not idle, since a new
// key would have the configured limit; Delete it when done.
//
// Sweep is optional: a Limiter at MaxKeys removes idle keys itself. Call
// it periodically to return their memory sooner.
func (l *Limiter) Sweep() int { return l.keys.sweep(l) }

// Len returns the number of keys the Limiter holds.
func (l *Limiter) Len() int { return l.keys.len() }
