package local

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// params is a bucket's immutable configuration. All buckets of a Limiter
// share one until SetLimit gives a key its own.
type params struct {
	alg    Algorithm
	limit  int64  // requests per window
	burst  int64  // TokenBucket: capacity; window algorithms: limit
	window int64  // nanoseconds
	t      int64  // TokenBucket: nanoseconds per token
	tau    int64  // TokenBucket: burst * t, the most a bucket may run ahead
	recipT uint64 // TokenBucket: ceil(2^64 / t), for tokens
	ahead  int64  // window algorithms: how many windows a word can be ahead of now
}

func newParams(alg Algorithm, limit int64, window time.Duration, burst int64) *params {
	p := &params{alg: alg, limit: limit, burst: limit, window: int64(window)}
	if alg == TokenBucket {
		p.burst = burst
		p.t = emission(limit, window)
		p.tau = burst * p.t
		p.recipT = math.MaxUint64/uint64(p.t) + 1 // wraps to 0 for t == 1, which tokens handles
	} else {
		p.ahead = maxLag/p.window + 2
	}
	return p
}

// bucket is one key's state. Its fields are used as the algorithm needs:
//
//   - TokenBucket: s0 is GCRA's theoretical arrival time (TAT) in
//     nanoseconds since the Limiter's epoch; s1 counts the reservations
//     given back (see Reservation.Cancel).
//   - FixedWindow: s0 packs the window number and its count.
//   - SlidingWindow: s0 and s1 each pack a window number and its count; the
//     window's parity picks the slot.
//   - SlidingLog: log.
//
// A bucket is retired (its words set to a sentinel) when its key is removed
// or resized; a decision that finds it retired reloads the entry's bucket.
// Retiring by atomic swap captures the last state exactly, so no decision
// is lost across a resize.
type bucket struct {
	p   *params
	s0  atomic.Int64
	s1  atomic.Int64
	log *slidingLog
}

const (
	retiredTAT = -1 << 63 // TokenBucket sentinel
	retiredWin = -1       // window sentinel: count 0xffffffff exceeds any limit
)

func newBucket(p *params) *bucket {
	b := new(bucket)
	b.init(p)
	return b
}

func (b *bucket) init(p *params) {
	b.p = p
	if p.alg == SlidingLog {
		b.log = &slidingLog{}
	}
}

// take decides a request of cost n >= 0 at now (nanoseconds since the
// epoch). ok is false if the bucket was retired; the caller must reload.
func (b *bucket) take(now, n int64) (r Decision, ok bool) {
	switch b.p.alg {
	case TokenBucket:
		return b.takeGCRA(now, n)
	case FixedWindow:
		return b.takeFixed(now, n)
	case SlidingWindow:
		return b.takeSliding(now, n)
	default:
		return b.log.take(b.p, now, n)
	}
}

// takeGCRA is the generic cell rate algorithm: a request of cost n conforms
// if, after pushing the TAT n emission intervals past max(TAT, now), the
// bucket runs no more than tau ahead of now.
func (b *bucket) takeGCRA(now, n int64) (Decision, bool) {
	tat, allowed, ok := b.gcra(now, n)
	return b.p.gcraResult(tat, now, n, allowed), ok
}

// gcra decides and returns the TAT after the decision (the one it found,
// if refused). It returns raw words rather than a Decision so that the hot
// path builds the Decision once, in registers, instead of copying it up
// through every call.
func (b *bucket) gcra(now, n int64) (tat int64, allowed, ok bool) {
	p := b.p
	for {
		tat := b.s0.Load()
		if tat == retiredTAT {
			return 0, false, false
		}
		next := max(tat, now) + n*p.t
		if n > p.burst || (n > 0 && next-now > p.tau) {
			return tat, false, true
		}
		if n == 0 || b.s0.CompareAndSwap(tat, next) {
			return next, true, true
		}
	}
}

// gcraResult describes a decision for a request of cost n that left the
// bucket at tat.
func (p *params) gcraResult(tat, now, n int64, allowed bool) Decision {
	// One composite literal, so the compiler keeps the Decision in registers.
	remaining, reset := p.gcraLeft(tat, now)
	var retry time.Duration
	switch {
	case allowed:
	case n > p.burst:
		retry = Never
	default:
		retry = time.Duration(max(tat, now) + n*p.t - p.tau - now)
	}
	return Decision{limit: p.burst, remaining: remaining, retryAfter: retry, resetAfter: reset}
}

// gcraLeft returns the whole tokens left and the time to full for a TAT.
func (p *params) gcraLeft(tat, now int64) (int64, time.Duration) {
	ahead := tat - now
	if ahead <= 0 {
		return p.burst, 0
	}
	return p.tokens(p.tau - ahead), time.Duration(ahead)
}

// tokens returns floor(d/t), the whole tokens in d nanoseconds, for
// 0 <= d <= tau. It multiplies by a precomputed reciprocal, ceil(2^64/t),
// and corrects the one-off rounding, because an integer division would be
// the slowest instruction on the hot path.
func (p *params) tokens(d int64) int64 {
	if d <= 0 || p.t == 1 {
		return max(d, 0)
	}
	q, _ := bits.Mul64(uint64(d), p.recipT)
	if int64(q)*p.t > d {
		q--
	}
	return int64(q)
}

// Window words pack a window number (mod 2^32) in the high half and that
// window's count in the low half.
func packWin(w int64, count int64) int64 { return int64(uint64(uint32(w))<<32 | uint64(count)) }

func unpackWin(st int64) (w uint32, count int64) {
	return uint32(uint64(st) >> 32), int64(uint32(st))
}

// floorDiv divides rounding towards minus infinity, so instants before the
// epoch fall in negative windows rather than in window 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// effectiveWindow returns the window to decide in: the one now falls in,
// or a later one a word already records if the clock went backwards, so
// going back in time never reopens a window.
//
// A word keeps its window modulo 2^32, so a word written 2^31 windows ago
// or more (25 days of 1 ms windows) reads as ahead of now. No word is
// really ahead by more than p.ahead windows: every decision happens no
// earlier than the Limiter's high-water mark, which trails any time it has
// seen by at most maxLag. A word further ahead is an old one, and counts
// nothing now.
func effectiveWindow(p *params, w int64, words ...int64) int64 {
	ew := w
	for _, st := range words {
		sw, _ := unpackWin(st)
		if d := int64(int32(uint32(w) - sw)); d < 0 && -d <= p.ahead {
			ew = max(ew, w-d)
		}
	}
	return ew
}

// countIn returns the count a word holds for window w, zero if it holds an
// older window.
func countIn(st int64, w int64) int64 {
	sw, c := unpackWin(st)
	if sw != uint32(w) {
		return 0
	}
	return c
}

func (b *bucket) takeFixed(now, n int64) (Decision, bool) {
	p := b.p
	r := Decision{limit: p.limit}
	w := floorDiv(now, p.window)
	for {
		st := b.s0.Load()
		if st == retiredWin {
			return r, false
		}
		ew := effectiveWindow(p, w, st)
		count := countIn(st, ew)
		end := (ew+1)*p.window - now
		if n > p.limit || (n > 0 && count+n > p.limit) {
			r.remaining = p.limit - count
			r.resetAfter = time.Duration(end)
			if n > p.limit {
				r.retryAfter = Never
			} else {
				r.retryAfter = time.Duration(end)
			}
			return r, true
		}
		if n == 0 || b.s0.CompareAndSwap(st, packWin(ew, count+n)) {
			r.remaining = max(0, p.limit-count-n)
			if count+n > 0 {
				r.resetAfter = time.Duration(end)
			}
			return r, true
		}
	}
}

// mulDivCeil returns ceil(a*b/c) for a*b < c*2^64, without overflow.
func mulDivCeil(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, rem := bits.Div64(hi, lo, c)
	if rem != 0 {
		q++
	}
	return q
}

// maxAhead bounds how far a resized token bucket may run ahead of now.
const maxAhead = 1 << 61

// mulDivCeilSat returns ceil(a*b/c) for non-negative a, b and positive c,
// or maxAhead if that does not fit.
func mulDivCeilSat(a, b, c int64) int64 {
	hi, _ := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return maxAhead
	}
	return int64(min(mulDivCeil(uint64(a), uint64(b), uint64(c)), maxAhead))
}

// mulDivFloor returns floor(a*b/c) for a*b < c*2^64.
func mulDivFloor(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// slidingEstimate is the sliding window counter's estimate: the previous
// window's count weighted by the part of it the sliding window still
// covers (rounded up, so the estimate never flatters), plus the current
// count.
func slidingEstimate(prev, cur, window, elapsed int64) int64 {
	if prev == 0 {
		return cur
	}
	return int64(mulDivCeil(uint64(prev), uint64(window-elapsed), uint64(window))) + cur
}

func (b *bucket) takeSliding(now, n int64) (Decision, bool) {
	p := b.p
	r := Decision{limit: p.limit}
	w := floorDiv(now, p.window)
	for {
		a, c := b.s0.Load(), b.s1.Load()
		if a == retiredWin || c == retiredWin {
			return r, false
		}
		ew := effectiveWindow(p, w, a, c)
		slot, curWord, prevWord := &b.s0, a, c
		if ew&1 != 0 {
			slot, curWord, prevWord = &b.s1, c, a
		}
		cur, prev := countIn(curWord, ew), countIn(prevWord, ew-1)
		start := ew * p.window
		elapsed := min(max(now-start, 0), p.window)
		est := slidingEstimate(prev, cur, p.window, elapsed)
		if n > p.limit || (n > 0 && est+n > p.limit) {
			r.remaining = max(0, p.limit-est)
			r.resetAfter = slidingReset(p, start, now, prev, cur)
			if n > p.limit {
				r.retryAfter = Never
			} else {
				r.retryAfter = slidingRetry(p, start, now, prev, cur, n)
			}
			return r, true
		}
		if n == 0 || slot.CompareAndSwap(curWord, packWin(ew, cur+n)) {
			r.remaining = max(0, p.limit-est-n)
			r.resetAfter = slidingReset(p, start, now, prev, cur+n)
			return r, true
		}
	}
}

// slidingReset is the time until both windows' counts stop weighing.
func slidingReset(p *params, start, now, prev, cur int64) time.Duration {
	switch {
	case cur > 0:
		return time.Duration(start + 2*p.window - now)
	case prev > 0:
		return time.Duration(start + p.window - now)
	}
	return 0
}

// slidingRetry is the time until a refused request of cost n <= limit would
// be admitted: when the previous window's weight has decayed enough, or,
// if the current window alone leaves no room, that far into the next one.
func slidingRetry(p *params, start, now, prev, cur, n int64) time.Duration {
	if room := p.limit - cur - n; room >= 0 {
		// Need ceil(prev*(W-e)/W) <= room, that is W-e <= floor(room*W/prev).
		e := p.window - int64(mulDivFloor(uint64(room), uint64(p.window), uint64(prev)))
		return time.Duration(max(start+e-now, 1))
	}
	next := start + p.window
	room := p.limit - n
	if cur <= room {
		return time.Duration(max(next-now, 1))
	}
	e := p.window - int64(mulDivFloor(uint64(room), uint64(p.window), uint64(cur)))
	return time.Duration(max(next+e-now, 1))
}

// idleAt returns the earliest time from which the bucket, left alone,
// holds nothing a new bucket of the same parameters would not (a full
// token bucket, windows that no longer weigh, a log with nothing in its
// window): at or before now if it already does. Decisions only move it
// later; a resize or a cancelled reservation can bring it forward.
func (b *bucket) idleAt(now int64) int64 {
	p := b.p
	switch p.alg {
	case TokenBucket:
		if tat := b.s0.Load(); tat != retiredTAT {
			return tat
		}
	case FixedWindow:
		if st := b.s0.Load(); st != retiredWin {
			return fixedIdleAt(p, now, st)
		}
	case SlidingWindow:
		if a, c := b.s0.Load(), b.s1.Load(); a != retiredWin && c != retiredWin {
			return slidingIdleAt(p, now, a, c)
		}
	default:
		return b.log.idleAt(p)
	}
	return math.MaxInt64 // retired: never idle, never removed twice
}

// fixedIdleAt is when a fixed window's word stops counting: the end of
// the window it counts in, or math.MinInt64 if it counts nothing.
func fixedIdleAt(p *params, now, st int64) int64 {
	ew := effectiveWindow(p, floorDiv(now, p.window), st)
	if countIn(st, ew) == 0 {
		return math.MinInt64
	}
	return windowEdge(ew+1, p.window)
}

// slidingIdleAt is when the sliding window counter's words stop weighing:
// a count in the current window weighs until the end of the next one.
func slidingIdleAt(p *params, now, a, c int64) int64 {
	ew := effectiveWindow(p, floorDiv(now, p.window), a, c)
	switch {
	case countIn(a, ew)+countIn(c, ew) > 0:
		return windowEdge(ew+2, p.window)
	case countIn(a, ew-1)+countIn(c, ew-1) > 0:
		return windowEdge(ew+1, p.window)
	}
	return math.MinInt64
}

// windowEdge returns w*window, the start of window w, or math.MaxInt64 if
// that does not fit.
func windowEdge(w, window int64) int64 {
	hi, lo := bits.Mul64(uint64(max(w, 0)), uint64(window))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// retireIfIdle retires the bucket if it is idle at now and reports whether
// it did; if not, idleAt is the earliest time it could be. A concurrent
// decision either lands before (and the bucket is no longer idle) or
// finds it retired.
func (b *bucket) retireIfIdle(now int64) (retired bool, idleAt int64) {
	p := b.p
	for {
		switch p.alg {
		case TokenBucket:
			tat := b.s0.Load()
			if tat == retiredTAT || tat > now {
				return false, b.idleAt(now)
			}
			if b.s0.CompareAndSwap(tat, retiredTAT) {
				return true, 0
			}
		case FixedWindow:
			st := b.s0.Load()
			if st == retiredWin || fixedIdleAt(p, now, st) > now {
				return false, b.idleAt(now)
			}
			if b.s0.CompareAndSwap(st, retiredWin) {
				return true, 0
			}
		case SlidingWindow:
			a, c := b.s0.Load(), b.s1.Load()
			if a == retiredWin || c == retiredWin || slidingIdleAt(p, now, a, c) > now {
				return false, b.idleAt(now)
			}
			if b.s0.CompareAndSwap(a, retiredWin) {
				if b.s1.CompareAndSwap(c, retiredWin) {
					return true, 0
				}
				b.s0.Store(a) // a decision landed in s1: look again
			}
		default:
			return b.log.retireIfIdle(p, now)
		}
	}
}

// retire retires the bucket whatever its state and returns the words it
// held (for a log, its entries and the latest time it saw). Callers hold the shard lock, so no two retire one bucket.
func (b *bucket) retire() (s0, s1 int64, log []int64, latest int64) {
	switch b.p.alg {
	case TokenBucket:
		return b.s0.Swap(retiredTAT), 0, nil, 0
	case FixedWindow:
		return b.s0.Swap(retiredWin), 0, nil, 0
	case SlidingWindow:
		return b.s0.Swap(retiredWin), b.s1.Swap(retiredWin), nil, 0
	default:
		log, latest := b.log.retire()
		return 0, 0, log, latest
	}
}

// resized retires b and returns a bucket with parameters q that carries
// b's consumption over: the tokens a token bucket had spent stay spent,
// the window counts and log entries stay counted.
func (b *bucket) resized(q *params, now int64) *bucket {
	s0, s1, log, latest := b.retire()
	nb := newBucket(q)
	switch q.alg {
	case TokenBucket:
		// A full bucket stays full at any time, as a new one is, rather
		// than full from now on: stamping it with now would make a
		// decision at a time read just before the resize find it short.
		tat := s0
		if ahead := s0 - now; ahead > 0 {
			// ahead/t tokens are spent; they cost q.t each from now on.
			// Capped so that an absurd shrink cannot overflow; the cap is
			// still four times any bucket's span, so nothing is forgiven.
			tat = now + min(mulDivCeilSat(ahead, q.t, b.p.t), maxAhead)
		}
		nb.s0.Store(tat)
	case FixedWindow:
		nb.s0.Store(s0)
	case SlidingWindow:
		nb.s0.Store(s0)
		nb.s1.Store(s1)
	default:
		nb.log.restore(log, latest)
	}
	return nb
}
