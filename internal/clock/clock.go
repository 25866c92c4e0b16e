// Package clock is the single source of time for hybridlimit.
//
// Every package that needs the time takes a Clock instead of calling
// time.Now or starting a time.Ticker, so that tests and the simulator can
// drive the same code on a virtual timeline. Production code uses Real; tests
// and the simulator use a *Manual clock and move it by hand.
package clock

import (
	"sync"
	"time"
	_ "unsafe" // for go:linkname
)

// A Clock tells the time and makes timers.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time. Times from a real clock carry a
	// monotonic reading, so differences between them are immune to
	// wall-clock jumps.
	Now() time.Time

	// Nanotime returns a monotonic reading in nanoseconds from an arbitrary
	// origin fixed for the clock's life: cheaper than Now on the hot path,
	// where only differences matter. Nanotime and Now advance together:
	// t2.Sub(t1) equals n2-n1 for readings taken together.
	Nanotime() int64

	// NewTimer returns a Timer that fires once, d after now.
	// A d <= 0 fires at once.
	NewTimer(d time.Duration) Timer
}

// A Timer fires once by sending the time on its channel.
type Timer interface {
	// C returns the channel on which the time is delivered.
	// It has a buffer of one, so a timer never blocks its clock.
	C() <-chan time.Time

	// Stop prevents the Timer from firing. It reports whether the call
	// stopped the timer; false means it had already fired or been stopped.
	Stop() bool
}

// Real is the system clock: time.Now and time.NewTimer.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Nanotime is the runtime's monotonic clock. time.Now reads both the wall
// and the monotonic clock, two vDSO calls; a rate decision needs only the
// second, and it is the single largest cost of a decision.
func (realClock) Nanotime() int64 { return nanotime() }

// nanotime is linked to the runtime's monotonic clock, which the runtime
// keeps linkable for exactly this use (see runtime/time_nofake.go).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// Default is the clock a package's Config defaults to: Real, or, when
// called in a testing/synctest bubble, a clock on the bubble's fake time.
// Real's Nanotime reads the runtime's clock, which a bubble does not fake:
// time would stand still for a limiter made in a bubble while its timers
// ran on the bubble's clock. So a user's test of code that uses a limiter
// runs on fake time and waits out a window without sleeping, as with
// golang.org/x/time/rate, and the hot path outside a bubble pays nothing
// for it (time.Since, which follows the bubble, cost a decision 13% more:
// two runtime calls where nanotime is one).
func Default() Clock {
	if time.Since(origin) < 0 {
		return bubbleClock{}
	}
	return Real
}

// origin is when the process started. A synctest bubble's clock starts
// at midnight UTC on 2000-01-01, before origin, so time.Since(origin) is
// below zero in a bubble and only there.
var origin = time.Now()

// bubbleStart is when every synctest bubble's clock starts.
var bubbleStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// bubbleClock is the clock of a limiter made in a testing/synctest bubble.
type bubbleClock struct{ realClock }

// Nanotime is the bubble's fake time (time.Now reads it there), counted
// from an hour before the bubble's start, so that readings are never zero
// or near it (callers use 0 for "never set").
func (bubbleClock) Nanotime() int64 { return int64(time.Since(bubbleStart) + time.Hour) }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Manual is a clock that moves only when told to, for tests and the
// simulator. Its times carry no monotonic reading. Timers fire, in deadline
// order, when Advance or Set moves the clock to or past their deadline.
//
// The zero value is not usable; create one with NewManual.
// A Manual clock is safe for concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    time.Time
	origin time.Time // Nanotime's zero
	timers []*manualTimer
}

// NewManual returns a Manual clock that reads start.
func NewManual(start time.Time) *Manual {
	start = start.Round(0)
	return &Manual{now: start, origin: start}
}

// Now returns the clock's current time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Nanotime returns the nanoseconds from the clock's start to now, negative
// if it has been set back before its start.
func (m *Manual) Nanotime() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(m.now.Sub(m.origin))
}

// Advance moves the clock forward by d and fires every timer that is due.
// A negative d moves the clock backwards, which code under test must
// tolerate; no timer fires then.
func (m *Manual) Advance(d time.Duration) {
	m.mu.Lock()
	m.setLocked(m.now.Add(d))
	m.mu.Unlock()
}

// Set moves the clock to t, forwards or backwards, and fires every timer
// that is due.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	m.setLocked(t.Round(0))
	m.mu.Unlock()
}

func (m *Manual) setLocked(t time.Time) {
	m.now = t
	kept := m.timers[:0]
	var due []*manualTimer
	for _, mt := range m.timers {
		if !mt.deadline.After(t) {
			due = append(due, mt)
		} else {
			kept = append(kept, mt)
		}
	}
	clear(m.timers[len(kept):])
	m.timers = kept
	// Fire in deadline order, so a test that advances past several timers
	// sees them in the order a real clock would have fired them.
	for len(due) > 0 {
		first := 0
		for i, mt := range due {
			if mt.deadline.Before(due[first].deadline) {
				first = i
			}
		}
		mt := due[first]
		due = append(due[:first], due[first+1:]...)
		mt.fired = true
		select {
		case mt.c <- t:
		default:
		}
	}
}

// NewTimer returns a timer that fires when the clock reaches now+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	mt := &manualTimer{m: m, deadline: m.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		mt.fired = true
		mt.c <- m.now
		return mt
	}
	m.timers = append(m.timers, mt)
	return mt
}

// Timers reports how many timers are waiting to fire. Tests use it to wait
// until a goroutine under test has armed its timer before advancing.
func (m *Manual) Timers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

type manualTimer struct {
	m        *Manual
	deadline time.Time
	c        chan time.Time
	fired    bool
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	if t.fired {
		return false
	}
	for i, mt := range t.m.timers {
		if mt == t {
			t.m.timers = append(t.m.timers[:i], t.m.timers[i+1:]...)
			t.fired = true
			return true
		}
	}
	return false
}
