package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clock"
)

func TestRealNanotimeTracksNow(t *testing.T) {
	t.Parallel()
	t0, n0 := clock.Real.Now(), clock.Real.Nanotime()
	time.Sleep(20 * time.Millisecond)
	t1, n1 := clock.Real.Now(), clock.Real.Nanotime()
	assert.InDelta(t, float64(t1.Sub(t0)), float64(n1-n0), float64(5*time.Millisecond))
	timer := clock.Real.NewTimer(time.Millisecond)
	<-timer.C()
	assert.False(t, timer.Stop())
}

func TestManual(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewManual(start)
	assert.Equal(t, start, c.Now())
	assert.Zero(t, c.Nanotime())

	late := c.NewTimer(3 * time.Second)
	early := c.NewTimer(time.Second)
	stopped := c.NewTimer(2 * time.Second)
	require.Equal(t, 3, c.Timers())
	assert.True(t, stopped.Stop())
	assert.False(t, stopped.Stop())

	c.Advance(500 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("fired early")
	default:
	}
	c.Advance(3 * time.Second)
	assert.Equal(t, start.Add(1500*time.Millisecond+2*time.Second), <-early.C())
	<-late.C()
	assert.False(t, early.Stop())
	assert.Zero(t, c.Timers())
	select {
	case <-stopped.C():
		t.Fatal("a stopped timer fired")
	default:
	}

	c.Advance(-time.Hour)
	assert.Equal(t, int64(3500*time.Millisecond-time.Hour), c.Nanotime())
	c.Set(start)
	assert.Equal(t, start, c.Now())

	now := c.NewTimer(0)
	<-now.C()
}
