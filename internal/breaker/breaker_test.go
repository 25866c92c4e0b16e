package breaker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/breaker"
	"github.com/hybridlimit/hybridlimit/partition"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestBreakerOpensOnFailuresWithinWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fails []time.Duration
		open  bool
	}{
		{"two failures", []time.Duration{0, 100 * time.Millisecond}, false},
		{"three within a second", []time.Duration{0, 400 * time.Millisecond, 900 * time.Millisecond}, true},
		{"three spread out", []time.Duration{0, 800 * time.Millisecond, 1600 * time.Millisecond}, false},
		{"the last three within a second", []time.Duration{0, 2 * time.Second, 2100 * time.Millisecond, 2200 * time.Millisecond}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := breaker.New(partition.BreakerConfig{})
			require.NoError(t, err)
			for _, f := range tt.fails {
				require.True(t, b.Allow(at(f)))
				b.Failure(at(f))
			}
			last := at(tt.fails[len(tt.fails)-1])
			assert.Equal(t, tt.open, b.State(last) == breaker.Open)
			assert.Equal(t, !tt.open, b.Allow(last))
		})
	}
}

func TestBreakerSuccessResetsTheRun(t *testing.T) {
	t.Parallel()
	b, err := breaker.New(partition.BreakerConfig{})
	require.NoError(t, err)
	b.Failure(at(0))
	b.Failure(at(10 * time.Millisecond))
	b.Success()
	b.Failure(at(30 * time.Millisecond))
	assert.Equal(t, breaker.Closed, b.State(at(30*time.Millisecond)))
}

func TestBreakerHalfOpenNeedsSeveralSuccesses(t *testing.T) {
	t.Parallel()
	b, err := breaker.New(partition.BreakerConfig{Failures: 1, Cooldown: 10 * time.Second, Successes: 3})
	require.NoError(t, err)
	b.Failure(at(0))
	assert.False(t, b.Allow(at(9*time.Second)), "cooling down")
	now := at(10 * time.Second)
	assert.Equal(t, breaker.HalfOpen, b.State(now))
	require.True(t, b.Allow(now), "the probe")
	assert.False(t, b.Allow(now), "one probe at a time")
	b.Success()
	require.True(t, b.Allow(now))
	b.Success()
	assert.Equal(t, breaker.HalfOpen, b.State(now), "two lucky calls are not enough")
	require.True(t, b.Allow(now))
	b.Failure(now)
	assert.Equal(t, breaker.Open, b.State(now), "a failed probe opens it again")
	assert.False(t, b.Allow(at(19*time.Second)), "for a whole cool-down")

	now = at(20 * time.Second)
	for range 3 {
		require.True(t, b.Allow(now))
		b.Success()
	}
	assert.Equal(t, breaker.Closed, b.State(now))
	assert.True(t, b.Allow(now))
}

func TestNewBreakerRejects(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]partition.BreakerConfig{
		"Failures":  {Failures: -1},
		"Within":    {Within: -1},
		"Cooldown":  {Cooldown: -1},
		"Successes": {Successes: -1},
	} {
		_, err := breaker.New(cfg)
		require.ErrorIs(t, err, partition.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "BreakerConfig."+field)
	}
}
