// Package fleettest measures fleets of hybrid Limiters under load: it
// drives them with real goroutines on the wall clock, records every
// arrival and admission, and compares the result with the limit and with
// an ideal single limiter fed the same arrivals.
package fleettest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// Limiters starts n Limiters, node i with the Config cfg(i) returns
// (named node-1 … node-n unless it names itself), and closes them when
// the test ends. Close must succeed, except that a node cut off from its
// fleet (not Healthy) cannot hand back its leases and may report
// fleet.ErrUnreachable.
func Limiters(t testing.TB, n int, cfg func(i int) hybrid.Config) []*hybrid.Limiter {
	t.Helper()
	out := make([]*hybrid.Limiter, n)
	for i := range out {
		c := cfg(i)
		if c.Node == "" {
			c.Node = fmt.Sprintf("node-%d", i+1)
		}
		l, err := hybrid.New(c)
		require.NoError(t, err)
		t.Cleanup(func() {
			cut := l.Health().Level != partition.Healthy
			if err := l.Close(); err != nil && !(cut && errors.Is(err, fleet.ErrUnreachable)) {
				t.Errorf("closing %s: %v", c.Node, err)
			}
		})
		out[i] = l
	}
	return out
}

// Run is a fleet of Limiters offered load for a while: what each node was
// offered and admitted, in nanoseconds since the start.
type Run struct {
	Start    time.Time
	Offered  []int64         // every arrival, all nodes
	Admitted []int64         // every admission, all nodes
	ByNode   [][]int64       // each node's admissions
	Latency  []time.Duration // how long each Allow call took, all nodes
	// Arrivals is every arrival with its node's decision, all nodes, in
	// the order of Offered. Several may share a time; each keeps its own
	// decision, which Offered and Admitted alone cannot say.
	Arrivals []Arrival
}

// Arrival is one request a Run offered.
type Arrival struct {
	At       int64 // nanoseconds since the run's start
	Admitted bool  // whether its node admitted it
}

// Drive drives each of nodes with its own goroutines, offering rates[i]
// requests per second of key for d, and collects every arrival.
func Drive(t testing.TB, nodes []*hybrid.Limiter, key string, rates []float64, d time.Duration) *Run {
	t.Helper()
	return DriveUntil(t, nodes, key, rates, func(now time.Duration) bool { return now >= d })
}

// DriveUntil is Drive until done, which is called about once a
// millisecond with the time since the start, returns true.
func DriveUntil(t testing.TB, nodes []*hybrid.Limiter, key string, rates []float64, done func(now time.Duration) bool) *Run {
	t.Helper()
	return drive(t, nodes, key, func(i int, now time.Duration) float64 { return rates[i] * now.Seconds() }, done)
}

// DriveLoad is Drive with a load that changes over time: due(i, now) is
// how many requests node i should have been offered in all by now, the
// time since the start. A step in due is a burst: its requests are
// offered back to back.
func DriveLoad(t testing.TB, nodes []*hybrid.Limiter, key string, due func(i int, now time.Duration) float64, d time.Duration) *Run {
	t.Helper()
	return drive(t, nodes, key, due, func(now time.Duration) bool { return now >= d })
}

// Decider decides one request on one node of a fleet that is not made
// of hybrid Limiters (a peer's, in the benchmarks module): whether it was
// admitted, or why it could not be decided.
type Decider func() (bool, error)

// DriveDeciders is DriveLoad for fleets of any kind: node i decides with
// nodes[i], and due(i, now) is how many requests it should have been
// offered by now.
func DriveDeciders(t testing.TB, nodes []Decider, due func(i int, now time.Duration) float64, d time.Duration) *Run {
	t.Helper()
	return driveDeciders(t, nodes, due, func(now time.Duration) bool { return now >= d })
}

func drive(t testing.TB, nodes []*hybrid.Limiter, key string, due func(i int, now time.Duration) float64, done func(now time.Duration) bool) *Run {
	t.Helper()
	deciders := make([]Decider, len(nodes))
	for i, l := range nodes {
		deciders[i] = func() (bool, error) {
			dec, err := l.Allow(key)
			return dec.Allowed(), err
		}
	}
	return driveDeciders(t, deciders, due, done)
}

func driveDeciders(t testing.TB, nodes []Decider, due func(i int, now time.Duration) float64, done func(now time.Duration) bool) *Run {
	t.Helper()
	const perNode = 2 // goroutines per node
	run := &Run{Start: time.Now(), ByNode: make([][]int64, len(nodes))}
	var stop atomic.Bool
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		for !done(time.Since(run.Start)) {
			time.Sleep(time.Millisecond)
		}
		stop.Store(true)
	})
	for i, allow := range nodes {
		for range perNode {
			wg.Go(func() {
				var offered, admitted []int64
				var arrivals []Arrival
				var took []time.Duration
				issued := 0
				for !stop.Load() {
					now := time.Since(run.Start)
					for want := int(due(i, now) / perNode); issued < want; issued++ {
						start := time.Now()
						at := int64(start.Sub(run.Start))
						offered = append(offered, at)
						ok, err := allow()
						took = append(took, time.Since(start))
						if err != nil {
							t.Error(err)
							return
						}
						arrivals = append(arrivals, Arrival{at, ok})
						if ok {
							admitted = append(admitted, at)
						}
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				run.Offered = append(run.Offered, offered...)
				run.Admitted = append(run.Admitted, admitted...)
				run.Latency = append(run.Latency, took...)
				run.Arrivals = append(run.Arrivals, arrivals...)
				run.ByNode[i] = append(run.ByNode[i], admitted...)
			})
		}
	}
	wg.Wait()
	return run
}

// PerNode is how many each node admitted.
func (r *Run) PerNode() []int {
	out := make([]int, len(r.ByNode))
	for i, b := range r.ByNode {
		out[i] = len(b)
	}
	return out
}

// Percentile is the q-quantile (0 < q <= 1) of the Allow latencies.
func (r *Run) Percentile(q float64) time.Duration {
	if len(r.Latency) == 0 {
		return 0
	}
	s := slices.Clone(r.Latency)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// MaxInWindow is the most admissions in any window of length w, sliding
// in steps of w/100.
func (r *Run) MaxInWindow(w time.Duration) int { return r.MaxInWindowFrom(w, 0) }

// MaxAligned is the most admissions in any window of length w aligned to
// the epoch, as a window algorithm counts them.
func (r *Run) MaxAligned(w time.Duration) int {
	off := int64(time.Duration(r.Start.UnixNano()) % w)
	bins := map[int64]int{}
	best := 0
	for _, at := range r.Admitted {
		i := (at + off) / int64(w)
		bins[i]++
		best = max(best, bins[i])
	}
	return best
}

// Ideal is how many of the run's arrivals a single limiter of policy p
// admits.
func (r *Run) Ideal(t testing.TB, p hybrid.Policy) int { return len(r.IdealRun(t, p).Admitted) }

// IdealRun is what a single limiter of policy p admits of the run's
// arrivals, and when.
func (r *Run) IdealRun(t testing.TB, p hybrid.Policy) *Run {
	t.Helper()
	return r.IdealRunChanged(t, p, -1, 0)
}

// IdealRunChanged is IdealRun for a limiter whose limit and burst become
// limit at the run's time change (local.Limiter.SetLimitAt: what was
// spent stays spent), as a fleet's policy changed then; a negative
// change is none.
func (r *Run) IdealRunChanged(t testing.TB, p hybrid.Policy, change time.Duration, limit int64) *Run {
	t.Helper()
	l := r.ideal(t, p)
	arrivals := append([]int64(nil), r.Offered...)
	slices.Sort(arrivals)
	ideal := &Run{Start: r.Start, Offered: arrivals}
	for _, at := range arrivals {
		if change >= 0 && at >= int64(change) {
			require.NoError(t, l.SetLimitAt("k", r.Start.Add(change), limit, limit))
			change = -1
		}
		res, err := l.AllowNAt("k", r.Start.Add(time.Duration(at)), 1)
		require.NoError(t, err)
		if res.Allowed() {
			ideal.Admitted = append(ideal.Admitted, at)
		}
	}
	return ideal
}

// ideal is a single limiter of policy p on a manual clock set to the
// run's start, for replaying its arrivals at their times. A window
// algorithm's windows are aligned to the epoch, as the fleet's store
// aligns them (and as MaxAligned counts): a limiter whose windows began
// with the run would count other windows than the fleet's, and over a
// run of a few windows admit some hundreds more or fewer by that alone.
func (r *Run) ideal(t testing.TB, p hybrid.Policy) *local.Limiter {
	t.Helper()
	start := r.Start
	if p.Algorithm != local.TokenBucket && p.Window > 0 {
		start = start.Add(-time.Duration(start.UnixNano() % int64(p.Window)))
	}
	l, err := local.New(local.Config{Algorithm: p.Algorithm, Limit: p.Limit, Window: p.Window, Burst: p.Burst, Clock: clock.NewManual(start)})
	require.NoError(t, err)
	return l
}

// UnderLimit is the run's under-limit refusals, in percent of its
// arrivals: the requests a node refused while a single limiter of policy
// p, fed every arrival in time order, had at least half its burst left
// (for a window algorithm, half its Limit unspent) just before deciding
// the same request. These are the refusals a client well within its
// quota sees; the simulator's Result.UnderLimit counts them alike.
//
// Arrivals at the same nanosecond are replayed admissions first, so that
// a refusal is never counted against a bucket its neighbours were about
// to spend.
func (r *Run) UnderLimit(t testing.TB, p hybrid.Policy) float64 {
	t.Helper()
	require.Len(t, r.Arrivals, len(r.Offered), "fleettest: Run.Arrivals must hold every arrival of Offered, with its decision, as Drive records them")
	if len(r.Arrivals) == 0 {
		return 0
	}
	arrivals := slices.Clone(r.Arrivals)
	slices.SortStableFunc(arrivals, func(a, b Arrival) int {
		if c := cmp.Compare(a.At, b.At); c != 0 {
			return c
		}
		switch {
		case a.Admitted == b.Admitted:
			return 0
		case a.Admitted:
			return -1
		}
		return 1
	})
	l := r.ideal(t, p)
	under := 0
	for _, a := range arrivals {
		res, err := l.AllowNAt("k", r.Start.Add(time.Duration(a.At)), 1)
		require.NoError(t, err)
		left := res.Remaining() // what it had before: what is left, plus the request if admitted
		if res.Allowed() {
			left++
		}
		if !a.Admitted && 2*left >= res.Limit() {
			under++
		}
	}
	return 100 * float64(under) / float64(len(arrivals))
}

// Versus compares r with ideal, window by window of length w from the
// run's start, as the simulator does: the admissions beyond the ideal's,
// and the ideal's admissions r lacks, each in percent of the ideal's
// admissions.
func (r *Run) Versus(ideal *Run, w time.Duration) (overshoot, falseRejection float64) {
	count := func(ats []int64) map[int64]int {
		m := map[int64]int{}
		for _, at := range ats {
			m[at/int64(w)]++
		}
		return m
	}
	fleet, best := count(r.Admitted), count(ideal.Admitted)
	under := 0
	for win, i := range best {
		under += max(0, i-fleet[win])
	}
	// Summed over every window, admitted - ideal = over - under.
	over := under + len(r.Admitted) - len(ideal.Admitted)
	total := float64(max(1, len(ideal.Admitted)))
	return 100 * float64(over) / total, 100 * float64(under) / total
}

// WorstOver is the most r admitted beyond ideal in any window of length
// w from the run's start, as the simulator's worst window counts it.
func (r *Run) WorstOver(ideal *Run, w time.Duration) int {
	fleet, best := map[int64]int{}, map[int64]int{}
	for _, at := range r.Admitted {
		fleet[at/int64(w)]++
	}
	for _, at := range ideal.Admitted {
		best[at/int64(w)]++
	}
	worst := 0
	for win, f := range fleet {
		worst = max(worst, f-best[win])
	}
	return worst
}

// MaxInWindowFrom is MaxInWindow over the windows that start at or after
// from: the steady state, once a bucket's initial burst is spent.
func (r *Run) MaxInWindowFrom(w, from time.Duration) int {
	step := int64(w / 100)
	bins := map[int64]int{}
	last := int64(0)
	for _, at := range r.Admitted {
		bins[at/step]++
		last = max(last, at/step)
	}
	best := 0
	for i := int64(from) / step; i+100 <= last+1; i++ {
		sum := 0
		for j := i; j < i+100; j++ {
			sum += bins[j]
		}
		best = max(best, sum)
	}
	return best
}

// AdmittedBetween is how many of nodes' admissions fell in [from, to);
// with no nodes given, all of them.
func (r *Run) AdmittedBetween(from, to time.Duration, nodes ...int) int {
	if len(nodes) == 0 {
		for i := range r.ByNode {
			nodes = append(nodes, i)
		}
	}
	n := 0
	for _, i := range nodes {
		for _, at := range r.ByNode[i] {
			if at >= int64(from) && at < int64(to) {
				n++
			}
		}
	}
	return n
}

// Link is the level of h that says whether a node is in touch with its
// fleet: h.Level, except that a node Degraded only because its sync loop
// runs late (Health.Late set, its share whole), as on a machine loaded
// with every package's tests under the race detector, counts as
// Healthy. Tests that check a node was not cut off compare Link with
// partition.Healthy.
func Link(h partition.Health) partition.Level {
	if h.Level == partition.Degraded && h.Late > 0 && h.Factor == 1 {
		return partition.Healthy
	}
	return h.Level
}
