package local_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// hammer runs workers goroutines that each ask tries times for key, and
// returns the total admitted.
func hammer(l *local.Limiter, key string, workers, tries int) int64 {
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range tries {
				if r, err := l.Allow(key); err == nil && r.Allowed() {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}

// TestConcurrentOneKey: many goroutines on one key admit exactly what the
// model allows, phase after phase of a manual clock.
func TestConcurrentOneKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg local.Config
		// step is how far the clock moves between phases, and perPhase
		// what the model admits in each phase after the first.
		step     time.Duration
		first    int64
		perPhase int64
	}{
		{local.Config{Algorithm: local.TokenBucket, Limit: 100, Window: time.Second, Burst: 50}, 70 * time.Millisecond, 50, 7},
		{local.Config{Algorithm: local.FixedWindow, Limit: 40, Window: time.Second}, time.Second, 40, 40},
		{local.Config{Algorithm: local.SlidingWindow, Limit: 40, Window: time.Second}, 2 * time.Second, 40, 40},
		{local.Config{Algorithm: local.SlidingLog, Limit: 40, Window: time.Second}, time.Second, 40, 40},
	}
	for _, tt := range tests {
		t.Run(tt.cfg.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, tt.cfg)
			require.Equal(t, tt.first, hammer(l, "hot", 16, 200))
			for phase := range 5 {
				c.Advance(tt.step)
				require.Equal(t, tt.perPhase, hammer(l, "hot", 16, 200), "phase %d", phase)
			}
		})
	}
}

// TestConcurrentRealClock: on the real clock, a token bucket never admits
// more than burst + rate * elapsed, however many goroutines ask.
func TestConcurrentRealClock(t *testing.T) {
	t.Parallel()
	const rate, burst = 2000, 100
	l, err := local.New(local.Config{Limit: rate, Window: time.Second, Burst: burst})
	require.NoError(t, err)
	start := time.Now()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Since(start) < 200*time.Millisecond {
				if r, _ := l.Allow("k"); r.Allowed() {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := burst + int64(elapsed.Seconds()*rate) + 1
	assert.LessOrEqual(t, admitted.Load(), bound)
	assert.GreaterOrEqual(t, admitted.Load(), int64(burst), "the burst at least must pass")
}

// TestResizeLosesNothing resizes a key to the same limit over and over
// while goroutines spend it: every retire-and-replace must carry each
// decision over, so exactly the limit is admitted.
func TestResizeLosesNothing(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			const limit = 500
			l, _ := newManual(t, local.Config{Algorithm: alg, Limit: limit, Window: time.Hour})
			stop := make(chan struct{})
			resized := make(chan int)
			first := make(chan struct{}) // the resizer is running before the hammer starts
			go func() {
				n := 0
				for {
					select {
					case <-stop:
						resized <- n
						return
					default:
					}
					if err := l.SetLimit("hot", limit, limit); err != nil {
						panic(err)
					}
					if n++; n == 1 {
						close(first)
					}
				}
			}()
			<-first
			got := hammer(l, "hot", 8, 400)
			close(stop)
			n := <-resized
			assert.Equal(t, int64(limit), got, "after %d resizes", n)
			assert.Positive(t, n)
		})
	}
}

// TestSweepRacesDecisions sweeps continuously while goroutines spend keys
// whose buckets are full between phases: a sweep may remove a key only
// when it would decide as new, so no phase admits more than the limit.
func TestSweepRacesDecisions(t *testing.T) {
	t.Parallel()
	const limit = 20
	l, c := newManual(t, local.Config{Limit: limit, Window: time.Second})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				l.Sweep()
			}
		}
	})
	for phase := range 20 {
		key := fmt.Sprint("k", phase%3)
		got := hammer(l, key, 4, 50)
		require.Equal(t, int64(limit), got, "phase %d", phase)
		c.Advance(time.Second) // full again, so sweepable
	}
	close(stop)
	wg.Wait()
}
