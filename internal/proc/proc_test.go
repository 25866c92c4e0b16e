package proc_test

import (
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/internal/proc"
)

// TestIDInRange checks that every goroutine sees an id below GOMAXPROCS,
// and that with several Ps busy at once more than one id is seen.
func TestIDInRange(t *testing.T) {
	t.Parallel()
	procs := runtime.GOMAXPROCS(0)
	var (
		mu   sync.Mutex
		seen = map[int]bool{}
		wg   sync.WaitGroup
	)
	for range 4 * procs {
		wg.Go(func() {
			for range 10_000 {
				id := proc.ID()
				mu.Lock()
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for id := range seen {
		assert.GreaterOrEqual(t, id, 0)
		assert.Less(t, id, procs)
	}
	if procs > 1 {
		assert.Greater(t, len(seen), 1, "goroutines on %d Ps all saw one id", procs)
	}
}

func BenchmarkID(b *testing.B) {
	for b.Loop() {
		_ = proc.ID()
	}
}
