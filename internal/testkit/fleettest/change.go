package fleettest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Change is what DriveChange measured of a change made to a running
// fleet.
type Change struct {
	// At is when the change was made, since the run's start.
	At time.Duration
	// Busiest is the most the fleet admitted in a second from At on, and
	// Ideal the most an ideal single limiter of the policy, changed to
	// the new limit at At, admitted of the same arrivals.
	Busiest, Ideal int
}

// DriveChange offers each of n nodes perNode requests a second for d,
// node i deciding with decide(i); calls change once, in a goroutine of
// its own, at the first arrival from at on; and fails the test unless
// every node has applied it (applied(i)) within a second. p is the
// policy in force before the change, and limit its limit (and burst)
// after, for the ideal limiter.
func DriveChange(t testing.TB, n int, decide func(i int) (bool, error), perNode float64, d, at time.Duration,
	change func(), applied func(i int) bool, p hybrid.Policy, limit int64) Change {
	t.Helper()
	nodes := make([]Decider, n)
	for i := range nodes {
		nodes[i] = func() (bool, error) { return decide(i) }
	}
	var once sync.Once
	var changedAt atomic.Int64
	var wg sync.WaitGroup
	inForce := make([]atomic.Int64, n)
	run := DriveDeciders(t, nodes, func(i int, now time.Duration) float64 {
		if now >= at {
			once.Do(func() {
				changedAt.Store(int64(now))
				wg.Go(change)
			})
			if inForce[i].Load() == 0 && applied(i) {
				inForce[i].Store(int64(now))
			}
		}
		return perNode * now.Seconds()
	}, d)
	wg.Wait()
	c := Change{At: time.Duration(changedAt.Load())}
	require.NotZero(t, c.At, "the change was never made")
	took := make([]time.Duration, n)
	for i := range inForce {
		require.Positive(t, inForce[i].Load(), "node %d never applied the change", i+1)
		took[i] = time.Duration(inForce[i].Load()) - c.At
		assert.Less(t, took[i], time.Second, "node %d applied the change", i+1)
	}
	c.Busiest = run.MaxInWindowFrom(time.Second, c.At)
	c.Ideal = run.IdealRunChanged(t, p, c.At, limit).MaxInWindowFrom(time.Second, c.At)
	t.Logf("changed at %v, in force on the nodes after %v; busiest second after it %d (an ideal single limiter changed at once: %d)",
		c.At, took, c.Busiest, c.Ideal)
	return c
}
