package hybrid_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// redisSyncer returns a Redis Syncer on its own client of s, as a separate
// process would have.
func redisSyncer(tb testing.TB, s *redistest.Server) *global.Redis {
	tb.Helper()
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: s.DeadlineClient(tb), Timeout: time.Second})
	require.NoError(tb, err)
	return r
}

// fleetRun is a fleet of Limiters offered load for a while: what each
// node was offered and admitted, in nanoseconds since the start.
type fleetRun struct {
	start    time.Time
	offered  []int64 // every arrival, all nodes
	admitted []int64 // every admission, all nodes
	perNode  []int
}

// runFleet drives each of nodes with its own goroutines, offering rates[i]
// requests per second of key for d, and collects every arrival.
func runFleet(t *testing.T, nodes []*hybrid.Limiter, key string, rates []float64, d time.Duration) *fleetRun {
	t.Helper()
	const perNode = 2 // goroutines per node
	run := &fleetRun{start: time.Now(), perNode: make([]int, len(nodes))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, l := range nodes {
		for range perNode {
			wg.Go(func() {
				rate := rates[i] / perNode
				var offered, admitted []int64
				issued := 0
				for {
					now := time.Since(run.start)
					if now >= d {
						break
					}
					for due := int(rate * now.Seconds()); issued < due; issued++ {
						at := int64(time.Since(run.start))
						offered = append(offered, at)
						dec, err := l.Allow(key)
						if err != nil {
							t.Error(err)
							return
						}
						if dec.Allowed() {
							admitted = append(admitted, at)
						}
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				run.offered = append(run.offered, offered...)
				run.admitted = append(run.admitted, admitted...)
				run.perNode[i] += len(admitted)
			})
		}
	}
	wg.Wait()
	return run
}

// maxInWindow is the most admissions in any window of length w, sliding
// in steps of w/100.
func (r *fleetRun) maxInWindow(w time.Duration) int {
	step := int64(w / 100)
	bins := map[int64]int{}
	last := int64(0)
	for _, at := range r.admitted {
		bins[at/step]++
		last = max(last, at/step)
	}
	best := 0
	for i := int64(0); i <= last; i++ {
		sum := 0
		for j := i; j < i+100; j++ {
			sum += bins[j]
		}
		best = max(best, sum)
	}
	return best
}

// maxAligned is the most admissions in any window of length w aligned to
// the epoch, as a window algorithm counts them.
func (r *fleetRun) maxAligned(w time.Duration) int {
	off := int64(time.Duration(r.start.UnixNano()) % w)
	bins := map[int64]int{}
	best := 0
	for _, at := range r.admitted {
		i := (at + off) / int64(w)
		bins[i]++
		best = max(best, bins[i])
	}
	return best
}

// ideal is how many of the run's arrivals a single limiter of policy p
// admits.
func (r *fleetRun) ideal(t *testing.T, p hybrid.Policy) int {
	t.Helper()
	l, err := local.New(local.Config{Algorithm: p.Algorithm, Limit: p.Limit, Window: p.Window, Burst: p.Burst, Clock: clock.NewManual(r.start)})
	require.NoError(t, err)
	arrivals := append([]int64(nil), r.offered...)
	slices.Sort(arrivals)
	n := 0
	for _, at := range arrivals {
		res, err := l.AllowNAt("k", r.start.Add(time.Duration(at)), 1)
		require.NoError(t, err)
		if res.Allowed() {
			n++
		}
	}
	return n
}
