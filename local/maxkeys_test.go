package local_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/local"
)

// TestMaxKeysKeepsSpentKeys is issue 18's bypass: a key allowed 5 a day
// spends them, 8,192 one-off keys pass through a Limiter capped at 4,096,
// and the spent key must still be refused. Evicting it would hand it a
// fresh bucket.
func TestMaxKeysKeepsSpentKeys(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			const maxKeys = 4096
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 5, Window: 24 * time.Hour, MaxKeys: maxKeys})
			r, err := l.AllowN("victim", 5)
			require.NoError(t, err)
			require.True(t, r.Allowed())
			refused := 0
			for i := range 2 * maxKeys {
				if i%64 == 0 {
					c.Advance(time.Millisecond) // the victim is the least recently used
				}
				r, err := l.Allow(fmt.Sprint("one-off-", i))
				if err != nil {
					require.ErrorIs(t, err, local.ErrTooManyKeys)
					require.False(t, r.Allowed(), "an error must come with a refusal")
					refused++
				}
			}
			r, err = l.Allow("victim")
			require.NoError(t, err)
			assert.False(t, r.Allowed(), "the victim's spent quota must not come back")
			assert.LessOrEqual(t, l.Len(), maxKeys)
			assert.Equal(t, maxKeys+1, refused, "every one-off key past the cap is refused, visibly")
		})
	}
}

// spendAll creates n keys and spends 2 of each's 5.
func spendAll(t *testing.T, l *local.Limiter, prefix string, n int) {
	t.Helper()
	for i := range n {
		r, err := l.AllowN(fmt.Sprint(prefix, i), 2)
		require.NoError(t, err)
		require.True(t, r.Allowed())
	}
}

// TestMaxKeysAllSpentRefusesNewKeys: when every key held has spent
// something, a new key gets ErrTooManyKeys with a refusing Decision that says
// when the first held key will be idle, and the held keys keep their state.
func TestMaxKeysAllSpentRefusesNewKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		alg   local.Algorithm
		retry time.Duration // until the first key is idle
	}{
		{local.TokenBucket, 24 * time.Minute}, // 2 tokens at 12 minutes each
		{local.SlidingWindow, 2 * time.Hour},  // its window and the next
		{local.FixedWindow, time.Hour},
		{local.SlidingLog, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.alg.String(), func(t *testing.T) {
			t.Parallel()
			const maxKeys = 64
			l, _ := newManual(t, local.Config{Algorithm: tt.alg, Limit: 5, Window: time.Hour, MaxKeys: maxKeys})
			spendAll(t, l, "held-", maxKeys)
			assert.Equal(t, maxKeys, l.Len())

			r, err := l.Allow("newcomer")
			require.ErrorIs(t, err, local.ErrTooManyKeys)
			assert.False(t, r.Allowed())
			assert.Equal(t, tt.retry, r.RetryAfter())
			require.ErrorIs(t, l.SetLimit("newcomer", 9, 9), local.ErrTooManyKeys)
			if tt.alg == local.TokenBucket {
				_, err = l.Reserve("newcomer")
				require.ErrorIs(t, err, local.ErrTooManyKeys)
			}
			assert.Equal(t, maxKeys, l.Len())

			for i := range maxKeys {
				key := fmt.Sprint("held-", i)
				r, err := l.AllowN(key, 0)
				require.NoError(t, err)
				require.Equal(t, int64(3), r.Remaining(), "%s kept what it spent", key)
				r, err = l.AllowN(key, 4)
				require.NoError(t, err)
				require.False(t, r.Allowed(), key)
			}
		})
	}
}

// TestMaxKeysEvictsIdleKeys: a held key that has refilled decides as a new
// one would, so it makes room; one still spent does not.
func TestMaxKeysEvictsIdleKeys(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			const maxKeys, half = 64, 32
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 5, Window: time.Hour, MaxKeys: maxKeys})
			spendAll(t, l, "early-", half)
			// Late enough that the early keys are idle when the late ones
			// are not, for every algorithm (the sliding window counter
			// weighs a window for two).
			c.Advance(2 * time.Hour)
			spendAll(t, l, "late-", half)
			c.Advance(10 * time.Minute) // a late token bucket is full at 24 minutes

			spendAll(t, l, "new-", half) // room made by the early keys
			r, err := l.Allow("one-too-many")
			require.ErrorIs(t, err, local.ErrTooManyKeys)
			assert.False(t, r.Allowed())
			for i := range half {
				r, err := l.AllowN(fmt.Sprint("late-", i), 4)
				require.NoError(t, err)
				require.False(t, r.Allowed(), "late-%d must keep what it spent", i)
			}
			assert.Equal(t, maxKeys, l.Len())
		})
	}
}

// TestMaxKeysKeepsResizedKeys: a key given its own limit by SetLimit
// decides differently from a new key even when full, so neither Sweep nor
// the cap forgets it; setting it back to the configured limit does.
func TestMaxKeysKeepsResizedKeys(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 5, Window: time.Hour, MaxKeys: 2})
			require.NoError(t, l.SetLimit("share", 1, 1))
			c.Advance(3 * time.Hour)
			assert.Zero(t, l.Sweep(), "a full bucket with its own limit is not a new key")
			spendAll(t, l, "other-", 1)
			_, err := l.Allow("newcomer")
			require.ErrorIs(t, err, local.ErrTooManyKeys)
			r, err := l.AllowN("share", 2)
			require.NoError(t, err)
			assert.False(t, r.Allowed(), "the key kept its limit of 1")

			require.NoError(t, l.SetLimit("share", 5, 5))
			assert.Equal(t, 1, l.Sweep(), "back at the configured limit and full, it is idle")
		})
	}
}

// TestMaxKeysRacesDecisions: goroutines spend more keys than the cap in
// phases of a manual clock while another goroutine sweeps; no key is
// admitted more than its limit allows over the time that passed, every
// refusal for room is ErrTooManyKeys, and keys that refilled made room.
func TestMaxKeysRacesDecisions(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			const limit, maxKeys, pool = 3, 32, 96
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: limit, Window: time.Hour, MaxKeys: maxKeys})
			var admitted [pool]atomic.Int64
			var sweeper sync.WaitGroup
			stop := make(chan struct{})
			sweeper.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						l.Sweep()
					}
				}
			})
			// Five phases 50 minutes apart, in five aligned windows: at
			// most 5*limit for any algorithm (a token bucket: its burst
			// of 3 plus 10 refilled in the 200 minutes between).
			for phase := range 5 {
				c.Advance(50 * time.Minute)
				var workers sync.WaitGroup
				for w := range 4 {
					workers.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(w), uint64(phase)))
						for range 1000 {
							i := rng.IntN(pool)
							r, err := l.Allow(fmt.Sprint("k", i))
							if err != nil {
								if !assert.ErrorIs(t, err, local.ErrTooManyKeys) {
									return
								}
								continue
							}
							if r.Allowed() {
								admitted[i].Add(1)
							}
						}
					})
				}
				workers.Wait()
				require.LessOrEqual(t, l.Len(), maxKeys)
			}
			close(stop)
			sweeper.Wait()
			total := int64(0)
			for i := range admitted {
				n := admitted[i].Load()
				assert.LessOrEqual(t, n, int64(5*limit), "key k%d", i)
				total += n
			}
			assert.Greater(t, total, int64(2*maxKeys*limit), "keys that refilled made room for others")
		})
	}
}
