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
				assert.Zero(t, r.Remaining())
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

// TestSetLimitThenEarlierTime is issue 18's item 15 seen from local: a
// bucket created by SetLimit, then drained at a time read just before it,
// must admit its whole burst. A new key is full at any time, and a time
// earlier than one already seen counts as no time passing, not as a debt.
func TestSetLimitThenEarlierTime(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 100, Window: time.Second})
			c.Advance(time.Second)
			_, err := l.Allow("other") // the Limiter has seen this instant
			require.NoError(t, err)
			c.Advance(500 * time.Microsecond)
			at := c.Now()
			c.Advance(time.Microsecond)

			require.NoError(t, l.SetLimit("fresh", 10, 10))
			r, err := l.AllowNAt("fresh", at, 10)
			require.NoError(t, err)
			assert.True(t, r.Allowed(), "a new bucket's burst at a time just before SetLimit: %+v", r)
			r, err = l.AllowNAt("fresh", at, 1)
			require.NoError(t, err)
			assert.False(t, r.Allowed(), "and no more")
		})
	}
}

// TestSetLimitAt: a resize at an explicit time carries the spent tokens
// over as of that time, so a caller that read the clock once resizes and
// decides at the same instant.
func TestSetLimitAt(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 10, Window: time.Second})
			c.Advance(time.Second)
			at := c.Now()
			r, err := l.AllowNAt("spent", at, 6)
			require.NoError(t, err)
			require.True(t, r.Allowed())
			c.Advance(time.Millisecond) // the clock moves on; the caller still decides at at

			require.NoError(t, l.SetLimitAt("spent", at, 5, 5))
			r, err = l.AllowNAt("spent", at, 0)
			require.NoError(t, err)
			assert.Zero(t, r.Remaining(), "6 spent against a limit of 5")
			r, err = l.AllowNAt("spent", at, 1)
			require.NoError(t, err)
			assert.False(t, r.Allowed())

			require.NoError(t, l.SetLimitAt("fresh", at, 5, 5))
			r, err = l.AllowNAt("fresh", at, 5)
			require.NoError(t, err)
			assert.True(t, r.Allowed(), "a new key's whole burst at the time it was created")

			err = l.SetLimitAt("fresh", at, 0, 0)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "Config.Limit")
		})
	}
}

// TestWindowsAfterManyWindows: the window algorithms keep a window's
// number modulo 2^32. A key first seen, or seen again, more than 2^31
// windows after the Limiter began (25 days at 1 ms) must not take its own
// window for one in the future, where its count would stand for weeks.
func TestWindowsAfterManyWindows(t *testing.T) {
	t.Parallel()
	for _, alg := range []local.Algorithm{local.FixedWindow, local.SlidingWindow} {
		for _, idle := range []time.Duration{25 * 24 * time.Hour, 40 * 24 * time.Hour} {
			t.Run(fmt.Sprintf("%v/%v", alg, idle), func(t *testing.T) {
				t.Parallel()
				l, c := newManual(t, local.Config{Algorithm: alg, Limit: 2, Window: time.Millisecond})
				_, err := l.AllowN("old", 2)
				require.NoError(t, err)
				c.Advance(idle)
				for _, key := range []string{"new", "old"} {
					r, err := l.AllowN(key, 2)
					require.NoError(t, err)
					require.True(t, r.Allowed(), "%s: %+v", key, r)
					assert.LessOrEqual(t, r.ResetAfter(), 2*time.Millisecond, key)
					r, err = l.Allow(key)
					require.NoError(t, err)
					require.False(t, r.Allowed(), key)
					assert.LessOrEqual(t, r.RetryAfter(), 2*time.Millisecond, key)
				}
				c.Advance(5 * time.Millisecond)
				for _, key := range []string{"new", "old"} {
					r, err := l.Allow(key)
					require.NoError(t, err)
					assert.True(t, r.Allowed(), "%s a few windows later: %+v", key, r)
				}
			})
		}
	}
}
