package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestResetAfterFollowsTheClock: a token bucket's decisions from its lease
// read no clock of their own, and reckon ResetAfter from the sync loop's
// last reading (see tick). While the loop runs, ResetAfter still counts
// down with the time, overstated by at most about an Interval, and stays
// within the bucket's refill time.
func TestResetAfterFollowsTheClock(t *testing.T) {
	t.Parallel()
	const interval = 50 * time.Millisecond
	l, err := hybrid.New(hybrid.Config{Node: "n1", Interval: interval, Syncer: redisSyncer(t, redistest.StartServer(t)),
		HotKeyRate: -1, Policies: []hybrid.Policy{{Name: "api", Rate: 50, Burst: 100}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })

	// Spend 80 of the burst: the bucket is full again 1.6 s later.
	spent := 0
	for deadline := time.Now().Add(2 * time.Second); spent < 80 && time.Now().Before(deadline); {
		if d, err := l.Allow("k"); err == nil && d.Allowed() {
			spent++
		} else {
			time.Sleep(interval / 5)
		}
	}
	require.Equal(t, 80, spent, "the burst admitted within 2 s")
	time.Sleep(2 * interval) // the spending reaches the fleet

	first, err := l.Allow("k")
	require.NoError(t, err)
	require.True(t, first.Allowed())
	start := time.Now()
	time.Sleep(12 * interval)
	second, err := l.Allow("k")
	require.NoError(t, err)
	require.True(t, second.Allowed())
	elapsed := time.Since(start)

	for _, d := range []hybrid.Decision{first, second} {
		assert.Positive(t, d.ResetAfter())
		assert.LessOrEqual(t, d.ResetAfter(), 2*time.Second+2*interval, "within the bucket's refill time")
	}
	// Two decisions spent 40 ms of refill; the loop's reading may lag
	// the clock by an Interval and a round trip, more under CI's load.
	assert.LessOrEqual(t, second.ResetAfter(), first.ResetAfter()-elapsed+40*time.Millisecond+4*interval,
		"ResetAfter counts down with the time: %v then %v, %v later", first.ResetAfter(), second.ResetAfter(), elapsed)
}
