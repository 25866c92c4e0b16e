package local_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestResize: a Limiter's configured limit changed while it holds keys
// moves every key without a limit of its own to it, keeping what each
// spent; a key given its own limit keeps it; a new key starts under the
// new limit; a limit no bucket could hold is refused, changing nothing.
// For each algorithm.
func TestResize(t *testing.T) {
	t.Parallel()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow, local.FixedWindow, local.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, _ := newManual(t, local.Config{Algorithm: alg, Limit: 5, Window: time.Hour})
			take := func(key string, n int) int {
				got := 0
				for range n {
					if r, err := l.Allow(key); err == nil && r.Allowed() {
						got++
					}
				}
				return got
			}
			require.Equal(t, 2, take("a", 2))
			require.Equal(t, 5, take("b", 6))
			require.NoError(t, l.SetLimit("own", 3, 0))
			require.Error(t, l.Resize(0, 0))
			require.Error(t, l.Resize(-1, 0))
			require.NoError(t, l.Resize(10, 0))
			assert.Equal(t, 8, take("a", 20), "2 of 10 spent")
			assert.Equal(t, 5, take("b", 20), "5 of 10 spent")
			assert.Equal(t, 3, take("own", 20), "its own limit")
			assert.Equal(t, 10, take("new", 20), "a new key: the new limit")
			require.NoError(t, l.Resize(4, 0))
			assert.Zero(t, take("a", 5), "10 of 4 spent")
		})
	}
}

// TestResizeWhileRequestsFlow: decisions racing a Resize lose nothing
// and admit nothing past the larger of the two limits; keys made during
// it all end under the new limit (run with -race).
func TestResizeWhileRequestsFlow(t *testing.T) {
	t.Parallel()
	l, err := local.New(local.Config{Limit: 100, Window: time.Hour})
	require.NoError(t, err)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			<-start
			for i := range 500 {
				key := string(rune('a' + (g*500+i)%26))
				if r, err := l.Allow(key); err == nil && r.Allowed() {
					admitted.Add(1)
				}
			}
		})
	}
	close(start)
	require.NoError(t, l.Resize(50, 0))
	wg.Wait()
	assert.LessOrEqual(t, admitted.Load(), int64(26*100))
	for c := 'a'; c <= 'z'; c++ {
		r, err := l.AllowN(string(c), 0)
		require.NoError(t, err)
		assert.Equal(t, int64(50), r.Limit(), "key %c", c)
	}
}
