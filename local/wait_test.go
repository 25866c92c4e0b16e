package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

func TestReserveShapes(t *testing.T) {
	t.Parallel()
	l, c := newManual(t, local.Config{Limit: 10, Window: time.Second, Burst: 2})
	// Two pass at once, then each waits one more emission interval.
	want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
	for i, w := range want {
		r, err := l.Reserve("k")
		require.NoError(t, err)
		require.True(t, r.OK())
		assert.Equal(t, w, r.Delay(), "reservation %d", i)
	}
	// A reservation that would wait past maxDelay is not made.
	r, err := l.ReserveNAt("k", c.Now(), 1, 350*time.Millisecond)
	require.NoError(t, err)
	assert.False(t, r.OK())
	assert.Equal(t, local.Never, r.Delay())
	// Nor one above the burst.
	r, err = l.ReserveNAt("k", c.Now(), 3, local.Never)
	require.NoError(t, err)
	assert.False(t, r.OK())

	// Cancelling the latest reservation gives its slot back.
	r, err = l.Reserve("k")
	require.NoError(t, err)
	assert.Equal(t, 400*time.Millisecond, r.Delay())
	r.Cancel()
	r, err = l.Reserve("k")
	require.NoError(t, err)
	assert.Equal(t, 400*time.Millisecond, r.Delay())

	// Cancelling one that others queued behind gives nothing back.
	first, _ := l.Reserve("k")
	_, _ = l.Reserve("k")
	first.Cancel()
	r, _ = l.Reserve("k")
	assert.Equal(t, 700*time.Millisecond, r.Delay())
}

func TestReserveNeedsTokenBucket(t *testing.T) {
	t.Parallel()
	l, _ := newManual(t, local.Config{Algorithm: local.FixedWindow, Limit: 10, Window: time.Second})
	_, err := l.Reserve("k")
	require.ErrorIs(t, err, local.ErrReserveUnsupported)
}

// waitAsync runs WaitN in a goroutine and returns its result channel.
func waitAsync(ctx context.Context, l *local.Limiter, key string, n int) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.WaitN(ctx, key, n) }()
	return done
}

// awaitTimer waits until a goroutine has armed a timer on c.
func awaitTimer(t *testing.T, c *clock.Manual, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.Timers() >= n }, 5*time.Second, time.Millisecond)
}

func TestWait(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 2, Window: time.Second})
			ctx := context.Background()
			require.NoError(t, l.WaitN(ctx, "k", 2)) // at once

			done := waitAsync(ctx, l, "k", 1)
			awaitTimer(t, c, 1)
			select {
			case err := <-done:
				t.Fatalf("Wait returned early: %v", err)
			default:
			}
			// The sliding window counter waits longest: until the full
			// previous window has decayed to leave room.
			c.Advance(2 * time.Second)
			require.NoError(t, <-done)
		})
	}
}

func TestWaitErrors(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 2, Window: time.Second})
			ctx := context.Background()

			err := l.WaitN(ctx, "k", 3)
			require.Error(t, err, "a cost above the burst can never be waited for")
			assert.Contains(t, err.Error(), "exceeds")

			require.NoError(t, l.WaitN(ctx, "k", 2))
			short, cancel := context.WithDeadline(ctx, c.Now().Add(10*time.Millisecond))
			defer cancel()
			err = l.Wait(short, "k")
			require.Error(t, err)
			assert.Contains(t, err.Error(), "deadline")

			cancelled, cancelNow := context.WithCancel(ctx)
			done := waitAsync(cancelled, l, "k", 1)
			awaitTimer(t, c, 1)
			cancelNow()
			require.ErrorIs(t, <-done, context.Canceled)

			gone, cancelGone := context.WithCancel(ctx)
			cancelGone()
			require.ErrorIs(t, l.Wait(gone, "k"), context.Canceled)
		})
	}
}

// TestWaitCancelGivesBack: a token bucket wait cancelled before its slot
// returns the slot, so the next waiter is not pushed back.
func TestWaitCancelGivesBack(t *testing.T) {
	t.Parallel()
	l, c := newManual(t, local.Config{Limit: 10, Window: time.Second, Burst: 1})
	require.NoError(t, l.Wait(context.Background(), "k"))
	ctx, cancel := context.WithCancel(context.Background())
	done := waitAsync(ctx, l, "k", 1)
	awaitTimer(t, c, 1)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	r, err := l.Reserve("k")
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, r.Delay())
}
