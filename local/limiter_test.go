package local_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newManual returns a Limiter for cfg on a manual clock that starts at
// epoch.
func newManual(t *testing.T, cfg local.Config) (*local.Limiter, *clock.Manual) {
	t.Helper()
	c := clock.NewManual(epoch)
	cfg.Clock = c
	l, err := local.New(cfg)
	require.NoError(t, err)
	return l, c
}

var allAlgorithms = []local.Algorithm{local.TokenBucket, local.SlidingWindow, local.FixedWindow, local.SlidingLog}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   local.Config
		field string
	}{
		{"zero limit", local.Config{Window: time.Second}, "Limit"},
		{"negative limit", local.Config{Limit: -1, Window: time.Second}, "Limit"},
		{"zero window", local.Config{Limit: 1}, "Window"},
		{"negative window", local.Config{Limit: 1, Window: -time.Second}, "Window"},
		{"negative burst", local.Config{Limit: 1, Window: time.Second, Burst: -1}, "Burst"},
		{"faster than 1/ns", local.Config{Limit: 2e9, Window: time.Second}, "Limit"},
		{"huge burst", local.Config{Limit: 1, Window: time.Hour, Burst: math.MaxInt64 / 2}, "Burst"},
		{"unknown algorithm", local.Config{Algorithm: 9, Limit: 1, Window: time.Second}, "Algorithm"},
		{"window limit too big", local.Config{Algorithm: local.FixedWindow, Limit: 1 << 32, Window: time.Second}, "Limit"},
		{"log limit too big", local.Config{Algorithm: local.SlidingLog, Limit: local.MaxLogLimit + 1, Window: time.Second}, "Limit"},
		{"negative max keys", local.Config{Limit: 1, Window: time.Second, MaxKeys: -1}, "MaxKeys"},
		{"negative max key len", local.Config{Limit: 1, Window: time.Second, MaxKeyLen: -1}, "MaxKeyLen"},
		{"NaN rate", local.Config{Rate: math.NaN(), Burst: 1}, "Rate"},
		{"Inf rate", local.Config{Rate: math.Inf(1), Burst: 1}, "Rate"},
		{"negative rate", local.Config{Rate: -5, Burst: 1}, "Rate"},
		{"rate without burst", local.Config{Rate: 5}, "Burst"},
		{"rate with limit", local.Config{Rate: 5, Burst: 1, Limit: 3}, "Limit"},
		{"rate for a window", local.Config{Algorithm: local.SlidingWindow, Rate: 5, Burst: 1}, "Rate"},
		{"rate burst zero", local.Config{Rate: 5, Burst: -2}, "Burst"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := local.New(tt.cfg)
			require.ErrorIs(t, err, local.ErrInvalidConfig)
			assert.Nil(t, l)
			assert.Contains(t, err.Error(), "Config."+tt.field)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	l, err := local.New(local.Config{Limit: 10, Window: time.Second})
	require.NoError(t, err)
	cfg := l.Config()
	assert.Equal(t, local.TokenBucket, cfg.Algorithm)
	assert.Equal(t, int64(10), cfg.Burst)
	assert.Equal(t, local.DefaultMaxKeys, cfg.MaxKeys)
	assert.Equal(t, local.DefaultMaxKeyLen, cfg.MaxKeyLen)
	assert.Equal(t, clock.Real, cfg.Clock)
}

// step is one call in a scripted scenario: advance the clock, then ask for
// n and expect the result.
type step struct {
	advance   time.Duration
	n         int
	allowed   bool
	remaining int64
	retry     time.Duration // checked when not allowed
}

func runSteps(t *testing.T, l *local.Limiter, c *clock.Manual, steps []step) {
	t.Helper()
	for i, s := range steps {
		c.Advance(s.advance)
		r, err := l.AllowN("k", s.n)
		require.NoError(t, err)
		require.Equal(t, s.allowed, r.Allowed(), "step %d: %+v", i, r)
		assert.Equal(t, s.remaining, r.Remaining(), "step %d remaining", i)
		if !s.allowed {
			assert.Equal(t, s.retry, r.RetryAfter(), "step %d retry", i)
		} else {
			assert.Zero(t, r.RetryAfter(), "step %d", i)
		}
	}
}

func TestAlgorithms(t *testing.T) {
	t.Parallel()
	sec := time.Second
	tests := []struct {
		name  string
		cfg   local.Config
		steps []step
	}{
		{
			name: "gcra burst then refill",
			cfg:  local.Config{Limit: 10, Window: sec, Burst: 3}, // a token every 100ms
			steps: []step{
				{0, 1, true, 2, 0},
				{0, 2, true, 0, 0},
				{0, 1, false, 0, 100 * time.Millisecond},
				{50 * time.Millisecond, 1, false, 0, 50 * time.Millisecond},
				{50 * time.Millisecond, 1, true, 0, 0},
				{300 * time.Millisecond, 3, true, 0, 0},
				{0, 4, false, 0, local.Never}, // more than the burst, ever
				{time.Hour, 0, true, 3, 0},    // n == 0 only reports
			},
		},
		{
			name: "fixed window",
			cfg:  local.Config{Algorithm: local.FixedWindow, Limit: 3, Window: sec},
			steps: []step{
				{0, 2, true, 1, 0},
				{0, 2, false, 1, sec},
				{400 * time.Millisecond, 1, true, 0, 0},
				{0, 1, false, 0, 600 * time.Millisecond},
				{600 * time.Millisecond, 3, true, 0, 0}, // a new window
				{0, 4, false, 0, local.Never},
			},
		},
		{
			name: "sliding window",
			cfg:  local.Config{Algorithm: local.SlidingWindow, Limit: 10, Window: sec},
			steps: []step{
				{0, 10, true, 0, 0},
				{0, 1, false, 0, sec + 100*time.Millisecond},
				// Half into the next window, the previous 10 weigh 5.
				{1500 * time.Millisecond, 5, true, 0, 0},
				{0, 1, false, 0, 100 * time.Millisecond},
				{100 * time.Millisecond, 1, true, 0, 0},
				{0, 11, false, 0, local.Never},
			},
		},
		{
			name: "sliding log",
			cfg:  local.Config{Algorithm: local.SlidingLog, Limit: 3, Window: sec},
			steps: []step{
				{0, 1, true, 2, 0},
				{300 * time.Millisecond, 2, true, 0, 0},
				{0, 1, false, 0, 700 * time.Millisecond},
				{700 * time.Millisecond, 1, true, 0, 0},  // the first left the window
				{0, 2, false, 0, 300 * time.Millisecond}, // the two at 300ms must go
				{300 * time.Millisecond, 2, true, 0, 0},
				{0, 4, false, 0, local.Never},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, tt.cfg)
			runSteps(t, l, c, tt.steps)
		})
	}
}

// TestSeedBurst is the scenario the design was seeded with: 150 requests
// within one second against 100 per minute.
func TestSeedBurst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg  local.Config
		want int
	}{
		{local.Config{Algorithm: local.TokenBucket, Limit: 100, Window: time.Minute, Burst: 120}, 120},
		{local.Config{Algorithm: local.SlidingWindow, Limit: 100, Window: time.Minute}, 100},
		{local.Config{Algorithm: local.FixedWindow, Limit: 100, Window: time.Minute}, 100},
		{local.Config{Algorithm: local.SlidingLog, Limit: 100, Window: time.Minute}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.cfg.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, tt.cfg)
			admitted := 0
			for range 150 {
				// 150 requests 3ms apart: 447ms in all, less than the
				// 600ms the token bucket takes to earn one token back.
				r, err := l.Allow("client")
				require.NoError(t, err)
				if r.Allowed() {
					admitted++
				}
				c.Advance(3 * time.Millisecond)
			}
			assert.Equal(t, tt.want, admitted)
		})
	}
}

func TestKeyTooLong(t *testing.T) {
	t.Parallel()
	l, _ := newManual(t, local.Config{Limit: 1, Window: time.Second, MaxKeyLen: 8})
	res, err := l.Allow("123456789")
	require.ErrorIs(t, err, local.ErrKeyTooLong)
	assert.False(t, res.Allowed(), "a Decision that comes with an error refuses")
	assert.Equal(t, local.Never, res.RetryAfter())
	assert.Zero(t, l.Len(), "a refused key must not be stored")
	require.ErrorIs(t, l.SetLimit("123456789", 5, 5), local.ErrKeyTooLong)
	r, err := l.Allow("12345678")
	require.NoError(t, err)
	assert.True(t, r.Allowed())
}

func TestKeysAreIndependentAndAnyBytes(t *testing.T) {
	t.Parallel()
	l, _ := newManual(t, local.Config{Limit: 1, Window: time.Second})
	keys := []string{"", "a", "a\x00", "\xff\xfe", strings.Repeat("z", 256)}
	for _, k := range keys {
		r, err := l.Allow(k)
		require.NoError(t, err)
		assert.True(t, r.Allowed(), "%q first", k)
		r, err = l.Allow(k)
		require.NoError(t, err)
		assert.False(t, r.Allowed(), "%q second", k)
	}
	assert.Equal(t, len(keys), l.Len())
}

// TestClockBackwards: a clock set back counts as no time passing; it never
// refills a bucket nor panics.
func TestClockBackwards(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 5, Window: time.Second})
			c.Advance(10 * time.Second)
			for range 5 {
				r, err := l.Allow("k")
				require.NoError(t, err)
				require.True(t, r.Allowed())
			}
			for _, back := range []time.Duration{-time.Millisecond, -2 * time.Second, -time.Hour, -200 * 365 * 24 * time.Hour} {
				c.Advance(back)
				r, err := l.Allow("k")
				require.NoError(t, err)
				assert.False(t, r.Allowed(), "after moving back %v", back)
				assert.Positive(t, r.RetryAfter())
			}
		})
	}
}

func TestSetLimitKeepsState(t *testing.T) {
	t.Parallel()
	t.Run("gcra", func(t *testing.T) {
		t.Parallel()
		l, c := newManual(t, local.Config{Limit: 10, Window: time.Second, Burst: 10})
		r, _ := l.AllowN("k", 6)
		require.True(t, r.Allowed())
		// Halve the rate and the burst: 6 tokens stay spent, out of 5.
		require.NoError(t, l.SetLimit("k", 5, 5))
		r, _ = l.AllowN("k", 0)
		assert.True(t, r.Allowed(), "n == 0 only reports, even when overdrawn")
		r, _ = l.Allow("k")
		require.False(t, r.Allowed())
		assert.Equal(t, int64(5), r.Limit())
		// At 5/s, one token is back after 200ms beyond the 1 overdrawn.
		assert.Equal(t, 400*time.Millisecond, r.RetryAfter())
		c.Advance(400 * time.Millisecond)
		r, _ = l.Allow("k")
		assert.True(t, r.Allowed())
		// Grow it back: what is spent stays spent.
		require.NoError(t, l.SetLimit("k", 100, 100))
		r, _ = l.AllowN("k", 0)
		assert.Equal(t, int64(95), r.Remaining())
	})
	for _, alg := range []local.Algorithm{local.SlidingWindow, local.FixedWindow, local.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, _ := newManual(t, local.Config{Algorithm: alg, Limit: 10, Window: time.Second})
			r, _ := l.AllowN("k", 6)
			require.True(t, r.Allowed())
			require.NoError(t, l.SetLimit("k", 5, 0))
			r, _ = l.AllowN("k", 0)
			assert.True(t, r.Allowed(), "n == 0 only reports, even when over the limit")
			assert.Zero(t, r.Remaining())
			r, _ = l.Allow("k")
			assert.False(t, r.Allowed(), "6 counted against a limit of 5")
			require.NoError(t, l.SetLimit("k", 8, 0))
			r, _ = l.AllowN("k", 2)
			assert.True(t, r.Allowed())
			assert.Equal(t, int64(0), r.Remaining())
		})
	}
	t.Run("new key and bad limits", func(t *testing.T) {
		t.Parallel()
		l, _ := newManual(t, local.Config{Limit: 10, Window: time.Second})
		require.NoError(t, l.SetLimit("fresh", 2, 0))
		r, _ := l.AllowN("fresh", 3)
		assert.Equal(t, local.Never, r.RetryAfter())
		err := l.SetLimit("fresh", 0, 0)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Config.Limit")
	})
}

func TestSweep(t *testing.T) {
	t.Parallel()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l, c := newManual(t, local.Config{Algorithm: alg, Limit: 10, Window: time.Second})
			for i := range 100 {
				_, err := l.Allow(fmt.Sprint("idle-", i))
				require.NoError(t, err)
			}
			assert.Zero(t, l.Sweep(), "nothing is idle yet")
			c.Advance(2500 * time.Millisecond)
			_, err := l.Allow("busy")
			require.NoError(t, err)
			assert.Equal(t, 100, l.Sweep())
			assert.Equal(t, 1, l.Len())
			r, _ := l.AllowN("busy", 0)
			assert.Equal(t, int64(9), r.Remaining(), "the busy key kept its state")
		})
	}
}

// TestMaxKeys floods the limiter with distinct keys: it never holds more
// than MaxKeys, refuses new keys visibly while every key held is spent,
// and admits new ones again as held keys refill and make room.
func TestMaxKeys(t *testing.T) {
	t.Parallel()
	const maxKeys = 4096
	l, c := newManual(t, local.Config{Limit: 1, Window: time.Second, MaxKeys: maxKeys})
	admitted, refused := 0, 0
	for i := range 50 * maxKeys {
		if i%256 == 0 {
			c.Advance(10 * time.Millisecond) // 8 seconds in all
			require.LessOrEqual(t, l.Len(), maxKeys)
		}
		r, err := l.Allow(fmt.Sprint("flood-", i))
		if err != nil {
			require.ErrorIs(t, err, local.ErrTooManyKeys)
			require.False(t, r.Allowed())
			require.Positive(t, r.RetryAfter())
			refused++
			continue
		}
		require.True(t, r.Allowed())
		admitted++
	}
	// A second's worth of keys at a time: each refills, and so goes, a
	// second after it came.
	assert.GreaterOrEqual(t, admitted, 7*maxKeys)
	assert.LessOrEqual(t, admitted, 9*maxKeys)
	assert.Equal(t, 50*maxKeys, admitted+refused)
}

func TestDelete(t *testing.T) {
	t.Parallel()
	l, _ := newManual(t, local.Config{Limit: 1, Window: time.Hour})
	_, _ = l.Allow("k")
	assert.True(t, l.Delete("k"))
	assert.False(t, l.Delete("k"))
	r, _ := l.Allow("k")
	assert.True(t, r.Allowed())
}

func TestRateConfig(t *testing.T) {
	t.Parallel()
	l, c := newManual(t, local.Config{Rate: 4, Burst: 2})
	runSteps(t, l, c, []step{
		{0, 2, true, 0, 0},
		{0, 1, false, 0, 250 * time.Millisecond},
		{250 * time.Millisecond, 1, true, 0, 0},
	})
}
