package proc_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/internal/proc"
)

// TestIDInRange keeps every P busy at once, each goroutine spinning until
// all have started, and checks that the ids seen are below GOMAXPROCS and,
// with several Ps, not all one: an ID that always said 0 would fail.
func TestIDInRange(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	var (
		started atomic.Int32
		wg      sync.WaitGroup
		seen    = make([]map[int]bool, procs)
	)
	for g := range procs {
		seen[g] = map[int]bool{}
		wg.Go(func() {
			started.Add(1)
			for started.Load() < int32(procs) {
				seen[g][proc.ID()] = true
			}
			for range 1000 {
				seen[g][proc.ID()] = true
			}
		})
	}
	wg.Wait()
	all := map[int]bool{}
	for _, s := range seen {
		for id := range s {
			assert.GreaterOrEqual(t, id, 0)
			assert.Less(t, id, procs)
			all[id] = true
		}
	}
	if procs > 1 {
		assert.Greater(t, len(all), 1, "goroutines busy on %d Ps at once all saw one id", procs)
	}
}

func BenchmarkID(b *testing.B) {
	for b.Loop() {
		_ = proc.ID()
	}
}
