package loadfactor

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// TestStep: down fast, up slow, and not at all within the hysteresis.
func TestStep(t *testing.T) {
	t.Parallel()
	c, err := Config{Limiter: &hybrid.Limiter{}, Signal: func() float64 { return 1 }}.withDefaults()
	require.NoError(t, err)
	down := 0.9 / 5 // a step of Every (1 s) toward Floor (0.1) over Down (5 s)
	up := 0.9 / 300 // and back over Up (5 min)
	for _, tt := range []struct {
		name       string
		f, want, n float64
	}{
		{"a lower signal within a step: at once", 1, 0.9, 0.9},
		{"a much lower one: a step", 1, 0.2, 1 - down},
		{"below the floor: the floor", 0.15, 0, 0.1},
		{"above, within the hysteresis: stays", 0.5, 0.54, 0.5},
		{"above it: a slow step", 0.5, 0.9, 0.5 + up},
		{"above 1: clamped", 0.5, 7, 0.5 + up},
		{"1, within the hysteresis of 1: back to it", 0.999, 1, 1},
		{"NaN: stays", 0.5, math.NaN(), 0.5},
		{"the same: stays", 0.7, 0.7, 0.7},
	} {
		assert.InDelta(t, tt.n, c.step(tt.f, tt.want), 1e-9, tt.name)
	}
	// From 1 to the floor takes Down; back takes Up.
	f, steps := 1.0, 0
	for ; f > 0.1; steps++ {
		f = c.step(f, 0)
	}
	assert.InDelta(t, 5, steps, 1)
	for steps = 0; f < 1; steps++ {
		f = c.step(f, 1)
	}
	assert.InDelta(t, 300, steps, 1)
}

// TestRun: a Limiter's load factor follows the signal down within Down
// and back up within Up, and Run ends with its context.
func TestRun(t *testing.T) {
	t.Parallel()
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{{Name: "api", Mode: hybrid.Local, Limit: 100, Window: time.Hour}}})
	require.NoError(t, err)
	defer l.Close()
	var signal atomic.Value
	signal.Store(0.5)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Run(ctx, Config{Limiter: l, Signal: func() float64 { return signal.Load().(float64) },
			Every: 5 * time.Millisecond, Down: 20 * time.Millisecond, Up: 200 * time.Millisecond})
	}()
	factor := func() float64 { return l.Stats().Policies[0].LoadFactor }
	require.Eventually(t, func() bool { return factor() == 0.5 }, 5*time.Second, time.Millisecond)
	signal.Store(1.0)
	start := time.Now()
	require.Eventually(t, func() bool { return factor() == 1 }, 5*time.Second, time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "up is slow: 0.5 of the span over Up")
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestRunRefusesBadConfig(t *testing.T) {
	t.Parallel()
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{{Name: "api", Mode: hybrid.Local, Limit: 100, Window: time.Hour}}})
	require.NoError(t, err)
	defer l.Close()
	sig := func() float64 { return 1 }
	for _, c := range []Config{
		{Signal: sig},
		{Limiter: l},
		{Limiter: l, Signal: sig, Floor: 2},
		{Limiter: l, Signal: sig, Hysteresis: -1},
		{Limiter: l, Signal: sig, Every: -time.Second},
	} {
		assert.ErrorIs(t, Run(context.Background(), c), ErrInvalidConfig)
	}
	err = Run(context.Background(), Config{Limiter: l, Signal: func() float64 { return 0.5 }, Every: time.Millisecond, Policies: []string{"web"}})
	assert.ErrorIs(t, err, hybrid.ErrInvalidConfig, "a policy the Limiter does not have")
}
