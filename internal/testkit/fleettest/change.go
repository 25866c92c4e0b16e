package fleettest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Change is a change made to a running fleet by DriveChange.
type Change struct {
	// At is when it was made, since the run's start.
	At time.Duration
	// InForce is when each node had it, since the run's start (0: never).
	InForce []time.Duration
}

// DriveChange offers each of nodes perNode requests a second for d, calls
// change once, in a goroutine of its own, at the first arrival from at
// on, and notes when applied(i) first holds for node i after it.
func DriveChange(t testing.TB, nodes []Decider, perNode float64, d, at time.Duration, change func(), applied func(i int) bool) (*Run, Change) {
	t.Helper()
	var once sync.Once
	var changedAt atomic.Int64
	var wg sync.WaitGroup
	inForce := make([]atomic.Int64, len(nodes))
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
	c := Change{At: time.Duration(changedAt.Load()), InForce: make([]time.Duration, len(nodes))}
	for i := range inForce {
		c.InForce[i] = time.Duration(inForce[i].Load())
	}
	return run, c
}
