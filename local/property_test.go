package local_test

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

// The reference models below are the plain textbook algorithms, written
// for clarity, not speed. With a clock that never goes backwards, the
// Limiter must decide exactly as they do (the sliding window counter as
// its formula says); with any clock, it must stay within the bounds each
// algorithm documents.

type model interface {
	allow(now, n int64) bool
}

// refBucket is a token bucket kept as credit in nanoseconds: the textbook
// form that GCRA is equivalent to.
type refBucket struct {
	t, tau, credit, last int64
	started              bool
}

func (r *refBucket) allow(now, n int64) bool {
	if !r.started {
		r.credit, r.last, r.started = r.tau, now, true
	}
	if now > r.last {
		r.credit, r.last = min(r.tau, r.credit+now-r.last), now
	}
	if r.credit >= n*r.t {
		r.credit -= n * r.t
		return true
	}
	return false
}

// refFixed counts per aligned window.
type refFixed struct {
	limit, window int64
	counts        map[int64]int64
}

func (r *refFixed) allow(now, n int64) bool {
	w := floorDiv(now, r.window)
	if r.counts[w]+n > r.limit {
		return false
	}
	r.counts[w] += n
	return true
}

// refSliding is the sliding window counter's formula over a map of counts.
type refSliding struct {
	limit, window int64
	counts        map[int64]int64
}

func (r *refSliding) allow(now, n int64) bool {
	w := floorDiv(now, r.window)
	elapsed := now - w*r.window
	prev := r.counts[w-1]
	est := (prev*(r.window-elapsed)+r.window-1)/r.window + r.counts[w]
	if est+n > r.limit {
		return false
	}
	r.counts[w] += n
	return true
}

// refLog keeps every admission time.
type refLog struct {
	limit, window int64
	times         []int64
}

func (r *refLog) allow(now, n int64) bool {
	live := int64(0)
	for _, t := range r.times {
		if t > now-r.window {
			live++
		}
	}
	if live+n > r.limit {
		return false
	}
	for range n {
		r.times = append(r.times, now)
	}
	return true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func newModel(cfg local.Config) model {
	limit, window := cfg.Limit, int64(cfg.Window)
	switch cfg.Algorithm {
	case local.TokenBucket:
		t := (window + limit - 1) / limit
		return &refBucket{t: t, tau: cfg.Burst * t}
	case local.FixedWindow:
		return &refFixed{limit: limit, window: window, counts: map[int64]int64{}}
	case local.SlidingWindow:
		return &refSliding{limit: limit, window: window, counts: map[int64]int64{}}
	default:
		return &refLog{limit: limit, window: window}
	}
}

// op is one call: move the clock by dt, then ask for n.
type op struct {
	dt time.Duration
	n  int64
}

type admission struct{ at, n int64 }

// play runs ops against a Limiter and, if exact, against the model too,
// and returns what the Limiter admitted, at the latest time seen so far.
func play(t testing.TB, cfg local.Config, ops []op, exact bool) []admission {
	t.Helper()
	c := clock.NewManual(epoch)
	cfg.Clock = c
	l, err := local.New(cfg)
	require.NoError(t, err)
	m := newModel(cfg)
	var got []admission
	now, latest := int64(0), int64(0)
	for i, o := range ops {
		c.Advance(o.dt)
		now += int64(o.dt)
		latest = max(latest, now)
		r, err := l.AllowN("k", int(o.n))
		require.NoError(t, err)
		if exact && o.n > 0 {
			want := m.allow(now, o.n)
			require.Equal(t, want, r.Allowed(), "op %d (%+v) at %v: limiter and model disagree", i, o, time.Duration(now))
		}
		if r.Allowed() {
			require.Zero(t, r.RetryAfter())
			if o.n > 0 {
				// A step back counts as no time passing: the admission
				// happened, as far as any bound is concerned, at the
				// latest time seen.
				got = append(got, admission{latest, o.n})
			}
		} else {
			require.Positive(t, r.RetryAfter(), "op %d: a refusal must say when to retry", i)
		}
		require.GreaterOrEqual(t, r.Remaining(), int64(0))
	}
	return got
}

// checkBounds asserts each algorithm's documented worst case over the
// admissions: what a token bucket admits never exceeds burst + rate *
// elapsed; the log never more than limit in any window; the counters
// never more than limit in an aligned window nor 2*limit in any window.
func checkBounds(t testing.TB, cfg local.Config, adm []admission) {
	t.Helper()
	if len(adm) == 0 {
		return
	}
	seen := adm
	window := int64(cfg.Window)
	switch cfg.Algorithm {
	case local.TokenBucket:
		tk := (window + cfg.Limit - 1) / cfg.Limit
		var total int64
		for _, a := range seen {
			total += a.n
			elapsed := a.at - seen[0].at
			require.LessOrEqual(t, total, cfg.Burst+elapsed/tk+1,
				"token bucket admitted %d by %v", total, time.Duration(elapsed))
		}
	default:
		sort.Slice(seen, func(i, j int) bool { return seen[i].at < seen[j].at })
		bound := cfg.Limit
		if cfg.Algorithm != local.SlidingLog {
			bound = 2 * cfg.Limit
			perWindow := map[int64]int64{}
			for _, a := range seen {
				w := floorDiv(a.at, window)
				perWindow[w] += a.n
				require.LessOrEqual(t, perWindow[w], cfg.Limit, "aligned window %d", w)
			}
		}
		// Any window (s-W, s] ending at an admission.
		lo := 0
		var inWin int64
		for hi := range seen {
			inWin += seen[hi].n
			for seen[lo].at <= seen[hi].at-window {
				inWin -= seen[lo].n
				lo++
			}
			require.LessOrEqual(t, inWin, bound, "window ending %v", time.Duration(seen[hi].at))
		}
	}
}

func randomConfig(r *rand.Rand, alg local.Algorithm) local.Config {
	limit := 1 + r.Int64N(12)
	cfg := local.Config{Algorithm: alg, Limit: limit, Window: time.Duration(1+r.Int64N(1000)) * time.Millisecond}
	if alg == local.TokenBucket {
		cfg.Burst = 1 + r.Int64N(12)
	} else {
		cfg.Burst = limit
	}
	return cfg
}

func randomOps(r *rand.Rand, cfg local.Config, count int, backwards bool) []op {
	ops := make([]op, count)
	for i := range ops {
		dt := time.Duration(r.Int64N(int64(cfg.Window) / 2))
		if r.IntN(4) == 0 {
			dt = 0 // bursts at one instant
		}
		if backwards && r.IntN(8) == 0 {
			dt = -time.Duration(r.Int64N(int64(3 * cfg.Window)))
		}
		ops[i] = op{dt: dt, n: r.Int64N(cfg.Limit + 2)}
	}
	return ops
}

func TestPropertyMatchesModel(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(alg), 42))
			for range 300 {
				cfg := randomConfig(r, alg)
				adm := play(t, cfg, randomOps(r, cfg, 300, false), true)
				checkBounds(t, cfg, adm)
			}
		})
	}
}

func TestPropertyBoundsWithClockGoingBack(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(uint64(alg), 7))
			for range 300 {
				cfg := randomConfig(r, alg)
				checkBounds(t, cfg, play(t, cfg, randomOps(r, cfg, 300, true), false))
			}
		})
	}
}

// FuzzBuckets decodes bytes into a configuration and a sequence of calls.
// Ops with the high bit of their first byte set move the clock backwards;
// without any, the Limiter must match the model exactly.
func FuzzBuckets(f *testing.F) {
	f.Add([]byte{0, 3, 10, 5, 1, 0, 1, 0, 2, 200, 1})
	f.Add([]byte{1, 5, 1, 9, 0, 3, 0, 3, 10, 3, 0x85, 1, 2, 1})
	f.Add([]byte{2, 2, 7, 2, 100, 1, 100, 1, 0, 3})
	f.Add([]byte{3, 4, 3, 4, 1, 1, 0, 2, 0, 4, 0xff, 1, 50, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 4 {
			return
		}
		alg := local.Algorithm(data[0] % 4)
		limit := int64(data[1]%16) + 1
		cfg := local.Config{
			Algorithm: alg,
			Limit:     limit,
			Window:    time.Duration(int64(data[2])+1) * 10 * time.Millisecond,
			Burst:     limit,
		}
		if alg == local.TokenBucket {
			cfg.Burst = int64(data[3]%16) + 1
		}
		var ops []op
		monotone := true
		for b := data[4:]; len(b) >= 2; b = b[2:] {
			dt := time.Duration(b[0]&0x7f) * time.Millisecond
			if b[0]&0x80 != 0 {
				dt, monotone = -dt*7, false
			}
			ops = append(ops, op{dt: dt, n: int64(b[1]) % (limit + 2)})
		}
		checkBounds(t, cfg, play(t, cfg, ops, monotone))
	})
}
