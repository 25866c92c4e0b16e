package local

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// ErrKeyTooLong is returned for a key longer than Config.MaxKeyLen. Such a
// request is neither admitted nor counted; shorten or hash the key.
var ErrKeyTooLong = errors.New("local: key longer than Config.MaxKeyLen")

// A Limiter rate-limits many keys independently, each with its own bucket
// of the configured algorithm, in this process alone.
//
// Deciding for a key that already exists takes no lock and allocates
// nothing. Idle keys are removed by Sweep, and when MaxKeys would be passed
// idle keys, then the least recently used, make room.
//
// A Limiter is safe for concurrent use. It starts no goroutines, so it
// needs no Close.
type Limiter struct {
	cfg   Config
	p     *params   // the configured parameters, shared by every key not resized
	epoch time.Time // the clock's Now and Nanotime at New, read together
	mono  int64
	keys  keyMap

	highWater atomic.Int64 // latest time seen, to within a millisecond
}

// New returns a Limiter for cfg, or an error naming the first field of cfg
// that is out of range.
func New(cfg Config) (*Limiter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		cfg:   cfg,
		p:     newParams(cfg.Algorithm, cfg.Limit, cfg.Window, cfg.Burst),
		epoch: cfg.Clock.Now(),
		mono:  cfg.Clock.Nanotime(),
	}
	l.keys.init(cfg.MaxKeys)
	return l, nil
}

// Config returns the configuration the Limiter was built with, defaults
// filled in.
func (l *Limiter) Config() Config { return l.cfg }

// Allow reports whether one request for key may happen now.
// It is shorthand for AllowN(key, 1).
func (l *Limiter) Allow(key string) (Result, error) {
	return l.allowN(key, l.since(l.cfg.Clock.Nanotime()), 1)
}

// AllowN reports whether n requests for key may happen now, and if so
// counts them. See AllowNAt.
func (l *Limiter) AllowN(key string, n int) (Result, error) {
	return l.allowN(key, l.since(l.cfg.Clock.Nanotime()), int64(n))
}

// AllowNAt reports whether n requests for key may happen at time t, and if
// so counts them. Either all n are admitted or none is.
//
// A cost n larger than the bucket can ever hold is refused with RetryAfter
// set to Never. A cost n <= 0 admits nothing and counts nothing: it reports
// the key's state, as admitted.
//
// Times earlier than ones already seen for the key count as no time
// passing: a clock going backwards never refills a bucket.
func (l *Limiter) AllowNAt(key string, t time.Time, n int) (Result, error) {
	return l.allowN(key, l.nanos(t), int64(n))
}

func (l *Limiter) allowN(key string, now, n int64) (Result, error) {
	if len(key) > l.cfg.MaxKeyLen {
		return Result{}, ErrKeyTooLong
	}
	now = l.monotone(now)
	cost := max(n, 0)
	h := hashKey(key)
	// The fast path: an existing key, found with atomic loads only.
	if e := l.keys.shardFor(h).tab.Load().lookup(h, key); e != nil {
		if b := e.b.Load(); b != nil {
			if b.p.alg == TokenBucket { // the common case, one call shallower
				if tat, allowed, ok := b.gcra(now, cost); ok {
					l.touch(e, now)
					return b.p.gcraResult(tat, now, cost, allowed), nil
				}
			} else if r, ok := b.take(now, cost); ok {
				l.touch(e, now)
				return r, nil
			}
		}
	}
	return l.allowSlow(h, key, now, cost), nil
}

// allowSlow decides for a new key, a retired bucket, or an algorithm other
// than TokenBucket.
func (l *Limiter) allowSlow(h uint64, key string, now, cost int64) Result {
	e := l.keys.shardFor(h).tab.Load().lookup(h, key)
	for {
		if e == nil {
			e = l.keys.insert(h, key, l.p, l)
		}
		b := e.b.Load()
		if b == nil {
			// Swept or evicted since we found it.
			e = nil
			continue
		}
		if r, ok := b.take(now, cost); ok {
			l.touch(e, now)
			return r
		}
		// Retired under us: a resize is publishing a new bucket, or the
		// key is being removed. Either takes nanoseconds.
		if e.b.Load() == b {
			runtime.Gosched()
		}
	}
}

// touch records the key's last use at millisecond-ish granularity, writing
// only when it changed, so a hot key does not write a shared word on every
// request.
func (l *Limiter) touch(e *entry, now int64) {
	if c := now >> 20; e.seen.Load() != c {
		e.seen.Store(c)
	}
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
	if now-hw > 1<<20 {
		l.highWater.Store(now)
	}
	return now
}

// retireIdle and retire make *Limiter the key map's sweeper.
func (l *Limiter) retireIdle(e *entry) bool {
	b := e.b.Load()
	return b != nil && b.retireIfIdle(l.now())
}

func (l *Limiter) retire(e *entry) {
	if b := e.b.Load(); b != nil {
		b.retire()
	}
}

// SetLimit changes key's limit and burst (window unchanged) while requests
// flow, keeping what the key has already spent: a token bucket's spent
// tokens stay spent at the new rate, window counts and log entries stay
// counted. A burst of 0 means the limit. A key not yet seen is created.
//
// SetLimit is how a node resizes a key's bucket to its share of a fleet
// quota. Decisions racing with it see either the old or the new bucket,
// never a mix, and none is lost.
func (l *Limiter) SetLimit(key string, limit, burst int64) error {
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
	h := hashKey(key)
	for {
		done := l.keys.withEntry(h, key, func(e *entry) {
			e.b.Store(e.b.Load().resized(q, l.now()))
		})
		if done {
			return nil
		}
		l.keys.insert(h, key, l.p, l)
	}
}

// Delete forgets key; its next request starts from a full bucket with the
// configured limit. It reports whether the key was present.
func (l *Limiter) Delete(key string) bool {
	return l.keys.delete(hashKey(key), key, l)
}

// Sweep removes every idle key (a full token bucket, windows that no
// longer count, a log with nothing in its window) and returns how many it
// removed. Removing an idle key loses nothing: it would decide exactly as a
// new one. A key given its own limit by SetLimit returns to the configured
// limit once swept.
//
// Call it periodically; the hybrid Limiter does so on each sync.
func (l *Limiter) Sweep() int { return l.keys.sweep(l) }

// Len returns the number of keys the Limiter holds.
func (l *Limiter) Len() int { return l.keys.len() }
