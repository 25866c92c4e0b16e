package local

import (
	"math"
	"sync"
	"time"
)

// slidingLog keeps the times of a key's most recent admissions, oldest
// first, in a ring that grows to at most the limit. Admitting n requests
// writes n slots, which no single atomic word can do, so a short per-key
// mutex serialises it; the other algorithms stay lock-free.
type slidingLog struct {
	mu      sync.Mutex
	ts      []int64 // ring buffer
	head    int     // index of the oldest entry
	n       int     // entries in use
	latest  int64   // latest time a decision saw
	retired bool
}

func (l *slidingLog) at(i int) int64 { return l.ts[(l.head+i)%len(l.ts)] }

// expire drops entries that have left the window ending at now.
func (l *slidingLog) expire(window, now int64) {
	for l.n > 0 && l.ts[l.head] <= now-window {
		l.head = (l.head + 1) % len(l.ts)
		l.n--
	}
}

// push appends count copies of t, growing the ring up to limit.
func (l *slidingLog) push(t int64, count, limit int64) {
	if need := l.n + int(count); need > len(l.ts) {
		size := max(need, min(2*len(l.ts), int(limit)), 4)
		size = min(size, int(limit))
		ts := make([]int64, size)
		for i := 0; i < l.n; i++ {
			ts[i] = l.at(i)
		}
		l.ts, l.head = ts, 0
	}
	for range count {
		l.ts[(l.head+l.n)%len(l.ts)] = t
		l.n++
	}
}

func (l *slidingLog) take(p *params, now, n int64) (Decision, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := Decision{limit: p.limit}
	if l.retired {
		return r, false
	}
	// A clock that went backwards counts as no time passing: the log
	// stays in order and nothing expires early.
	now = max(now, l.latest)
	l.latest = now
	if l.n > 0 {
		l.expire(p.window, now)
	}
	live := int64(l.n)
	if n > p.limit || (n > 0 && live+n > p.limit) {
		r.remaining = max(0, p.limit-live)
		if l.n > 0 {
			r.resetAfter = time.Duration(l.at(l.n-1) + p.window - now)
		}
		if n > p.limit {
			r.retryAfter = Never
		} else {
			// The (live+n-limit)th oldest entry must leave the window.
			r.retryAfter = time.Duration(l.at(int(live+n-p.limit-1)) + p.window - now)
		}
		return r, true
	}
	l.push(now, n, p.limit)
	r.remaining = max(0, p.limit-live-n)
	if l.n > 0 {
		r.resetAfter = time.Duration(l.at(l.n-1) + p.window - now)
	}
	return r, true
}

// idleAt is when the newest entry leaves the window; math.MinInt64 for
// an empty log, math.MaxInt64 for a retired one.
func (l *slidingLog) idleAt(p *params) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idleAtLocked(p)
}

func (l *slidingLog) idleAtLocked(p *params) int64 {
	switch {
	case l.retired:
		return math.MaxInt64
	case l.n == 0:
		return math.MinInt64
	}
	newest := l.at(l.n - 1)
	return newest + min(p.window, math.MaxInt64-newest)
}

func (l *slidingLog) retireIfIdle(p *params, now int64) (retired bool, idleAt int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at := l.idleAtLocked(p); at > now {
		return false, at
	}
	l.retired = true
	return true, 0
}

// retire marks the log retired and returns its entries, oldest first,
// and the latest time it saw.
func (l *slidingLog) retire() ([]int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.retired = true
	out := make([]int64, l.n)
	for i := range out {
		out[i] = l.at(i)
	}
	return out, l.latest
}

// restore loads ts (oldest first). After a shrink it may hold more than
// the new limit; those entries stay counted until they leave the window,
// and the ring never grows past the limit again.
func (l *slidingLog) restore(ts []int64, latest int64) {
	l.latest = latest
	l.ts = make([]int64, max(len(ts), 4))
	copy(l.ts, ts)
	l.head, l.n = 0, len(ts)
}
