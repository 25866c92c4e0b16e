package local

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// ErrReserveUnsupported is returned by ReserveNAt for an algorithm other
// than TokenBucket: only a token bucket can promise a future slot without
// holding a place in a window. Wait works with every algorithm.
var ErrReserveUnsupported = errors.New("local: reservations need Algorithm TokenBucket; use Wait or Allow")

// A Reservation is a promise of n requests at a future time, made by
// Reserve on a token bucket: leaky-bucket shaping, where a request is
// delayed instead of refused.
type Reservation struct {
	ok    bool
	delay time.Duration
	b     *bucket // nil unless there are tokens to give back
	sh    *shard  // the key's shard, told when the bucket may idle sooner
	gen   int64   // the bucket's give-back count before the reservation
	start int64   // the bucket's TAT before the reservation
	end   int64   // its TAT after
}

// OK reports whether the reservation was made. It is false when the cost
// exceeds the burst or the delay would exceed the caller's maximum.
func (r Reservation) OK() bool { return r.ok }

// Delay is how long the caller must wait before acting on the reservation;
// zero means now. It is Never when the reservation was not made.
func (r Reservation) Delay() time.Duration {
	if !r.ok {
		return Never
	}
	return r.delay
}

// Cancel gives the reservation's tokens back, for a caller that will not
// act on it after all. Only the latest reservation on a key can be given
// back: once another has queued behind it, its slot stays spent, so that
// the later one's promise still holds. Cancelling a reservation that was
// not made, that reserved nothing (n <= 0), or whose key has since been
// resized or removed, does nothing. A reservation is given back at most
// once, however often it, or a copy of it, is cancelled.
func (r Reservation) Cancel() {
	b := r.b
	if b == nil || b.s0.Load() != r.end {
		return
	}
	// A bare CAS of the TAT from end back to start would act again after
	// the reservation was given back and another of the same cost took
	// the same slot: the TAT would be end once more. So every give-back
	// first counts itself in s1, and only a reservation made since the
	// last one counted (gen unchanged) may give back. Then the TAT can
	// only have moved down since the reservation by a counted give-back,
	// so finding it at end means nothing came after.
	if !b.s1.CompareAndSwap(r.gen, r.gen+1) {
		return
	}
	if b.s0.CompareAndSwap(r.end, r.start) {
		r.sh.lowerIdle(r.start) // fuller, so idle sooner
	}
}

// Reserve reserves one request for key now, waiting as long as it takes.
// It is shorthand for ReserveNAt(key, now, 1, Never).
func (l *Limiter) Reserve(key string) (Reservation, error) {
	return l.ReserveNAt(key, l.cfg.Clock.Now(), 1, Never)
}

// ReserveNAt reserves n requests for key at time t if they can happen
// within maxDelay of t, and returns the reservation; the caller acts after
// its Delay. Unlike AllowNAt, a reservation is counted even when it lies in
// the future, so later callers queue behind it: requests are spaced out at
// the configured rate rather than refused. A cost n <= 0 reserves nothing:
// the Reservation is OK with no delay, and Cancel does nothing.
//
// It needs Algorithm TokenBucket and otherwise returns
// ErrReserveUnsupported. A new key when MaxKeys keys are held and none is
// idle gets ErrTooManyKeys.
func (l *Limiter) ReserveNAt(key string, t time.Time, n int, maxDelay time.Duration) (Reservation, error) {
	if l.cfg.Algorithm != TokenBucket {
		return Reservation{}, ErrReserveUnsupported
	}
	if len(key) > l.cfg.MaxKeyLen {
		return Reservation{}, ErrKeyTooLong
	}
	now := l.monotone(l.nanos(t))
	cost := max(int64(n), 0)
	h := hashKey(key)
	e := l.keys.shardFor(h).tab.Load().lookup(h, key)
	for {
		created := false
		if e == nil {
			var err error
			if e, created, err = l.keys.insert(h, key, l); err != nil {
				return Reservation{}, err
			}
		}
		b := e.b.Load()
		if b == nil {
			e, now = nil, l.monotone(now) // swept: see allowSlow
			continue
		}
		if r, ok := b.reserve(now, cost, maxDelay); ok {
			if created {
				l.keys.noteIdle(h, b.idleAt(now))
			}
			if r.b != nil {
				r.sh = l.keys.shardFor(h)
			}
			return r, nil
		}
		if e.b.Load() == b {
			runtime.Gosched() // retired under us: see allowSlow
		}
	}
}

// reserve takes n tokens, possibly in the future, if the wait is at most
// maxDelay. ok is false if the bucket was retired.
func (b *bucket) reserve(now, n int64, maxDelay time.Duration) (r Reservation, ok bool) {
	p := b.p
	for {
		gen := b.s1.Load() // before the TAT: see Cancel
		tat := b.s0.Load()
		if tat == retiredTAT {
			return r, false
		}
		if n > p.burst {
			return Reservation{}, true
		}
		next := max(tat, now) + n*p.t
		delay := time.Duration(max(next-p.tau-now, 0))
		if delay > maxDelay {
			return Reservation{}, true
		}
		if n == 0 {
			return Reservation{ok: true}, true
		}
		if b.s0.CompareAndSwap(tat, next) {
			return Reservation{ok: true, delay: delay, b: b, gen: gen, start: tat, end: next}, true
		}
	}
}

// Wait blocks until one request for key may happen, or ctx is done.
// It is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until n requests for key may happen, then counts them. It
// returns an error, counting nothing, if n can never be admitted, if ctx's
// deadline would pass first, or if ctx is done while waiting.
//
// A token bucket reserves a slot and sleeps until it (leaky-bucket
// shaping: arrivals leave at the configured rate). The window algorithms
// sleep for the refusal's RetryAfter and try again.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.cfg.Algorithm == TokenBucket {
		return l.waitReserve(ctx, key, n)
	}
	for {
		now := l.cfg.Clock.Now()
		r, err := l.AllowNAt(key, now, n)
		if err != nil || r.Allowed() {
			return err
		}
		if err := l.sleep(ctx, now, key, n, r.retryAfter); err != nil {
			return err
		}
	}
}

func (l *Limiter) waitReserve(ctx context.Context, key string, n int) error {
	now := l.cfg.Clock.Now()
	maxDelay := Never
	if dl, ok := ctx.Deadline(); ok {
		maxDelay = dl.Sub(now)
	}
	r, err := l.ReserveNAt(key, now, n, maxDelay)
	if err != nil {
		return err
	}
	if !r.OK() {
		if p := l.p.Load(); int64(n) > p.burst {
			return fmt.Errorf("local: WaitN(%q, %d): cost exceeds the burst of %d", key, n, p.burst)
		}
		return fmt.Errorf("local: WaitN(%q, %d): would exceed the context deadline", key, n)
	}
	if r.delay == 0 {
		return nil
	}
	timer := l.cfg.Clock.NewTimer(r.delay)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}

// sleep waits d on the Limiter's clock unless ctx ends first or its
// deadline would pass before the wait is over.
func (l *Limiter) sleep(ctx context.Context, now time.Time, key string, n int, d time.Duration) error {
	if d == Never {
		return fmt.Errorf("local: WaitN(%q, %d): cost exceeds the limit of %d", key, n, l.p.Load().limit)
	}
	if dl, ok := ctx.Deadline(); ok && now.Add(d).After(dl) {
		return fmt.Errorf("local: WaitN(%q, %d): would exceed the context deadline", key, n)
	}
	timer := l.cfg.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
