package hybrid_test

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestStarvedNodeKeepsItsLeases: one node on a real Redis, a key at 10^9
// a second (10^8 per 100 ms window: leases carry no slack beyond demand
// at this interval, see global's slackOf) that no traffic reaches. Two
// goroutines call Allow as fast as they can for a second, then 32, so
// that every core is busy and the sync loop waits for one at every
// step, beside one caller at a steady 20,000 a second. Such a node must
// not refuse: its leases are sized for how late its rounds start, and
// the goroutines refused while a sync is overdue yield to it. And
// whenever it does refuse for lateness (a starved loop can always be
// later than any lease), Health must not say Healthy. Before: 0.41-1.37%
// refused, all while Healthy; now 0.0003-0.0022%, none (under -race,
// where Allow is ten times slower: 0-0.0028% before, all while Healthy;
// none now).
//
// It saturates the machine on purpose, for 4 s, which starves every
// other package's timing-bound tests that `go test ./...` runs beside it
// (gossip's TestFleetAccuracy and TestForgedPackets failed so in CI): it
// runs only with HYBRIDLIMIT_SATURATE set, which `make test` sets in a
// run of its own after the others.
func TestStarvedNodeKeepsItsLeases(t *testing.T) {
	if os.Getenv("HYBRIDLIMIT_SATURATE") == "" {
		t.Skip("saturates the CPU: make test runs it alone, with HYBRIDLIMIT_SATURATE=1")
	}
	srv := redistest.StartServer(t)
	l, err := hybrid.New(hybrid.Config{
		Node:     "starved",
		Policies: []hybrid.Policy{{Name: "api", Limit: 100_000_000, Window: 100 * time.Millisecond}},
		Syncer:   redisSyncer(t, srv),
		Interval: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()

	var offered, refused, refusedHealthy atomic.Int64
	decide := func() {
		d, err := l.Allow("tenant")
		if err != nil {
			panic(err) // not require: on another goroutine
		}
		offered.Add(1)
		if !d.Allowed() {
			refused.Add(1)
			if l.Health().Level == partition.Healthy {
				refusedHealthy.Add(1)
			}
		}
	}
	const rate = 20_000
	steady := func(d time.Duration) {
		start := time.Now()
		for done := 0; time.Since(start) < d; runtime.Gosched() {
			for due := int(time.Since(start).Seconds() * rate); done < due; done++ {
				decide()
			}
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	busy := func(n int) {
		for range n {
			wg.Go(func() {
				for !stop.Load() {
					decide()
				}
			})
		}
	}
	// Warm up with two goroutines calling Allow, one a core: the node
	// serves what its cores can, as before the machine got busy, and
	// its forecast knows the rate. Thirty more then ask no more in all
	// (the cores were busy already) but leave the loop waiting for one.
	busy(2)
	steady(time.Second)
	offered.Store(0)
	refused.Store(0)
	refusedHealthy.Store(0)
	busy(30)
	steady(3 * time.Second)
	stop.Store(true)
	wg.Wait()
	n, r, rh := offered.Load(), refused.Load(), refusedHealthy.Load()
	t.Logf("32 busy goroutines, GOMAXPROCS %d: refused %d of %d (%.4f%%), %d of them while Healthy; health now %v",
		runtime.GOMAXPROCS(0), r, n, 100*float64(r)/float64(n), rh, l.Health().Level)
	// A refusal while the loop keeps time and an early refill is in
	// flight is the lease's, not lateness (see refusedLate): the node
	// stays Healthy. This test cannot tell the two apart; such refusals
	// are a handful in millions (2 of 5,654,815 in one CI run, 0 in 8
	// runs on this machine), lateness's were tens of thousands.
	assert.LessOrEqual(t, float64(rh), float64(n)/1_000_000, "a node refusing for lateness does not say Healthy")
	// The target is 0.01%, met alone (0.0003-0.0022% in eight runs); the
	// bound is ten times that, as other packages' tests share the cores
	// under go test ./... (0-0.025% beside the simulator's). Before it
	// was 0.41-1.37%.
	assert.LessOrEqual(t, float64(r), float64(n)/1_000, "a starved node keeps its leases: refusals at most 0.1%")
}
