package local_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestCancelIsIdempotent: a reservation gives its tokens back once, however
// often it, or a copy of it, is cancelled. Each extra Cancel must not give
// back a later reservation's tokens that happen to end at the same instant.
func TestCancelIsIdempotent(t *testing.T) {
	t.Parallel()
	l, _ := newManual(t, local.Config{Limit: 1, Window: time.Second, Burst: 1})
	first, err := l.Reserve("k")
	require.NoError(t, err)
	require.Zero(t, first.Delay())
	copied := first
	first.Cancel()

	second, err := l.Reserve("k")
	require.NoError(t, err)
	require.Zero(t, second.Delay(), "the cancelled token came back once")
	first.Cancel()
	copied.Cancel()

	third, err := l.Reserve("k")
	require.NoError(t, err)
	assert.Equal(t, time.Second, third.Delay(), "the second reservation's token is not the first's to give back")
}

// TestNonPositiveCostAddsNothing: a cost of zero or less, through any
// method, admits nothing, counts nothing and gives nothing back.
func TestNonPositiveCostAddsNothing(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		for _, n := range []int{0, -1, -5, math.MinInt} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				t.Parallel()
				l, c := newManual(t, local.Config{Algorithm: alg, Limit: 3, Window: time.Second})
				r, err := l.AllowN("k", 3)
				require.NoError(t, err)
				require.True(t, r.Allowed())

				r, err = l.AllowN("k", n)
				require.NoError(t, err)
				assert.True(t, r.Allowed(), "n <= 0 reports the state as admitted")
				assert.Zero(t, r.Remaining)
				require.NoError(t, l.WaitN(context.Background(), "k", n))
				if alg == local.TokenBucket {
					res, err := l.ReserveNAt("k", c.Now(), n, local.Never)
					require.NoError(t, err)
					res.Cancel()
					res.Cancel()
				}
				r, err = l.Allow("k")
				require.NoError(t, err)
				assert.False(t, r.Allowed(), "a cost of %d gave tokens back", n)
			})
		}
	}
}
