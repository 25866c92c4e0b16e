package clock_test

import (
	"testing"
	"testing/synctest"
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

// TestDefaultFollowsSynctest checks that Default is Real outside a
// testing/synctest bubble and, inside one, a clock on the bubble's fake
// time: positive readings that move exactly as the bubble's time does,
// and timers that fire on it.
func TestDefaultFollowsSynctest(t *testing.T) {
	t.Parallel()
	assert.Equal(t, clock.Real, clock.Default())
	synctest.Test(t, func(t *testing.T) {
		c := clock.Default()
		require.NotEqual(t, clock.Real, c)
		n0, t0 := c.Nanotime(), c.Now()
		assert.Greater(t, n0, int64(time.Minute), "never zero or near it")
		time.Sleep(90 * time.Second)
		assert.Equal(t, int64(90*time.Second), c.Nanotime()-n0)
		assert.Equal(t, 90*time.Second, c.Now().Sub(t0))
		timer := c.NewTimer(time.Hour)
		<-timer.C()
		assert.Equal(t, int64(90*time.Second+time.Hour), c.Nanotime()-n0)
	})
}
