package hybrid_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/partition"
)

var errDown = fmt.Errorf("dial tcp: connection refused: %w", fleet.ErrUnreachable)

// offer steps the clock through d in 10 ms steps, offering perStep
// requests for key at each and syncing every 100 ms, and returns what was
// admitted and how many admitted decisions were Degraded.
func offer(t *testing.T, l *hybrid.Limiter, clk *clock.Manual, key string, d time.Duration, perStep int) (admitted, degraded int) {
	t.Helper()
	for step := range int(d / (10 * time.Millisecond)) {
		for range perStep {
			dec, err := l.Allow(key)
			require.NoError(t, err)
			if dec.Allowed() {
				admitted++
				if dec.Degraded() {
					degraded++
				}
			}
		}
		clk.Advance(10 * time.Millisecond)
		if step%10 == 9 {
			_ = l.SyncOnce(context.Background())
		}
	}
	return admitted, degraded
}

// TestLadder cuts a node off and checks that it spends its lease, then
// limits itself to its share times the ladder's factor as it steps down,
// that Health follows, and that all of it is reported after the heal.
func TestLadder(t *testing.T) {
	t.Parallel()
	s := newScripted(1_000_000, "k")
	s.set(nil, 4) // share 1/4 of 1000/s: 250/s
	l, clk := manual(t, hybrid.Config{Syncer: s, Ladder: partition.LadderConfig{
		Steps: []partition.Step{{Until: time.Second, Factor: 1}, {Until: 3 * time.Second, Factor: 0.5}, {Factor: 0.25}},
	}})
	ok, _ := offer(t, l, clk, "k", time.Second, 10) // offered 1000/s
	require.Positive(t, ok)
	assert.Equal(t, partition.Health{Level: partition.Healthy, Since: time.Second, Factor: 1}, l.Health())

	s.set(errDown, 4)
	cutAt := clk.Now()
	total := 0
	phase := func(d time.Duration) int {
		n, _ := offer(t, l, clk, "k", d, 10)
		total += n
		return n
	}
	phase(500 * time.Millisecond) // the lease lapses, the full share takes over
	h := l.Health()
	assert.Equal(t, partition.Degraded, h.Level)
	assert.Equal(t, 1.0, h.Factor)
	assert.InDelta(t, 400*time.Millisecond, h.Since, float64(200*time.Millisecond), "cut since the last sync that reached the fleet")
	phase(time.Second)
	assert.Equal(t, partition.Emergency, l.Health().Level)
	assert.Equal(t, 0.5, l.Health().Factor)
	half := phase(time.Second) // 1.5s..2.5s after the cut: 125/s
	assert.InDelta(t, 125, half, 125*0.1, "half the share")
	phase(time.Second)
	assert.Equal(t, 0.25, l.Health().Factor)
	quarter := phase(2 * time.Second) // 3.5s..5.5s: 62.5/s
	assert.InDelta(t, 125, quarter, 125*0.1, "a quarter of the share")
	d, err := l.Allow("k")
	require.NoError(t, err)
	if !d.Allowed() {
		assert.True(t, d.Degraded(), "a refusal past the lease is the FailMode's")
	}
	t.Logf("cut for %v: admitted %d at factor 0.5 in 1s, %d at 0.25 in 2s", clk.Now().Sub(cutAt), half, quarter)

	before := s.consumed("k")
	s.set(nil, 4)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(context.Background()))
	assert.Equal(t, partition.Healthy, l.Health().Level)
	assert.Equal(t, 1.0, l.Health().Factor)
	reported := s.consumed("k") - before
	// Consumption older than the previous Window (1s) has rolled out of
	// the fleet's count and is not reported; the rest is, once.
	assert.LessOrEqual(t, reported, int64(total))
	assert.GreaterOrEqual(t, reported, int64(quarter/2), "at least the last second's")
	assert.LessOrEqual(t, reported, int64(quarter+20), "nothing from before the previous window")
}

// TestBreaker checks that a failing syncer is not called while its
// breaker is open, that it is probed after the cool-down, and that the
// first probe that succeeds brings the node back.
func TestBreaker(t *testing.T) {
	t.Parallel()
	s := newScripted(1_000_000, "k")
	l, clk := manual(t, hybrid.Config{Syncer: s, Breaker: partition.BreakerConfig{Cooldown: time.Second}})
	ctx := context.Background()
	total := admit(t, l, "k", 1) // the starter credit
	require.NoError(t, l.SyncOnce(ctx))
	calls := s.calls()

	s.set(errDown, 1)
	for range 3 {
		clk.Advance(100 * time.Millisecond)
		require.ErrorIs(t, l.SyncOnce(ctx), fleet.ErrUnreachable)
	}
	assert.Equal(t, calls+3, s.calls(), "three failures")
	for range 9 {
		clk.Advance(100 * time.Millisecond)
		total += admit(t, l, "k", 1)
		err := l.SyncOnce(ctx)
		require.ErrorIs(t, err, fleet.ErrUnreachable)
		assert.Contains(t, err.Error(), "circuit breaker is open")
	}
	assert.Equal(t, calls+3, s.calls(), "not called while open")
	clk.Advance(100 * time.Millisecond)
	require.Error(t, l.SyncOnce(ctx))
	assert.Equal(t, calls+4, s.calls(), "probed after the cool-down")

	s.set(nil, 1)
	clk.Advance(500 * time.Millisecond)
	require.Error(t, l.SyncOnce(ctx), "the failed probe reopened it for a full cool-down")
	assert.Equal(t, calls+4, s.calls())
	clk.Advance(500 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, partition.Healthy, l.Health().Level, "back on the first probe that succeeds")
	assert.Equal(t, calls+5, s.calls())
	assert.Equal(t, 1+9, total, "admitted by the fail-static bucket while open")
	assert.Equal(t, int64(total), s.consumed("k"), "everything reported once")
}

// TestFailover checks that a Limiter with two fleets reports to both,
// takes its leases from the failover while the primary is down, is not
// degraded meanwhile, and tells the primary what it missed once back.
func TestFailover(t *testing.T) {
	t.Parallel()
	primary, failover := newScripted(1_000_000, "k"), newScripted(500_000, "k")
	l, clk := manual(t, hybrid.Config{Syncer: primary, Failover: failover})
	ctx := context.Background()
	total := 0
	remaining := func() int64 {
		d, err := l.Allow("k")
		require.NoError(t, err)
		require.True(t, d.Allowed())
		require.False(t, d.Degraded())
		total++
		return d.Remaining()
	}
	step := func() {
		total += admit(t, l, "k", 20)
		clk.Advance(100 * time.Millisecond)
		_ = l.SyncOnce(ctx)
	}
	step()
	step()
	assert.Greater(t, remaining(), int64(900_000), "the primary's grants while it is up")

	primary.set(errDown, 1)
	before := total
	for range 10 {
		step()
		assert.Equal(t, partition.Healthy, l.Health().Level, "the failover is a fleet-wide view")
	}
	assert.Equal(t, 10*20, total-before, "nothing refused while the failover leases")
	assert.Less(t, remaining(), int64(500_000), "the failover's grants while the primary is down")

	primary.set(nil, 1)
	for range 2 {
		step()
	}
	admitted := int64(total)
	assert.Equal(t, admitted, failover.consumed("k"), "the failover heard everything")
	assert.Equal(t, admitted, primary.consumed("k"), "the primary was told what it missed, once")
}

// TestPartitionedGrant checks that a grant from the minority side of a
// split is capped at the node's share times the ladder's factor, and Health says so.
func TestPartitionedGrant(t *testing.T) {
	t.Parallel()
	s := newScripted(1_000_000, "k")
	l, clk := manual(t, hybrid.Config{Syncer: s})
	ctx := context.Background()
	admit(t, l, "k", 100)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	admit(t, l, "k", 100)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	whole := s.last().Demand

	s.split = 10 * time.Second // past the default ladder's 5s: factor 0.5
	admit(t, l, "k", 100)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	h := l.Health()
	assert.Equal(t, partition.Emergency, h.Level)
	assert.Equal(t, 0.5, h.Factor)
	assert.Equal(t, 5*time.Second, h.Since)
	got := admit(t, l, "k", int(2*whole))
	// Its share (weight 1 of 1000/s) over the 100 ms since the last
	// sync is 100; the ladder halves it, whatever the node demanded.
	assert.Greater(t, s.last().Demand, int64(50))
	assert.Equal(t, 50, got, "half the node's share of one interval")

	s.split = 0
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, partition.Healthy, l.Health().Level)
}

// strictDown is a fleet whose store never answers a Strict decision.
type strictDown struct {
	*scripted
	calls atomic.Int64
}

func (s *strictDown) Allow(context.Context, string, fleet.Limit, int64) (store.Decision, error) {
	s.calls.Add(1)
	return store.Decision{}, errDown
}

// TestStrictFailStatic checks that Strict decisions fall back to a local
// bucket of the node's share when the store is down, and stop calling it
// once the breaker opens.
func TestStrictFailStatic(t *testing.T) {
	t.Parallel()
	s := &strictDown{scripted: newScripted(0)}
	l, _ := manual(t, hybrid.Config{Syncer: s, FleetSize: 4, Policies: []hybrid.Policy{
		{Name: "strict", Mode: hybrid.Strict, Limit: 100, Window: time.Second},
	}})
	ok := 0
	for range 200 {
		d, err := l.Allow("k")
		require.NoError(t, err)
		assert.True(t, d.Degraded())
		if d.Allowed() {
			ok++
		}
	}
	assert.Equal(t, 25, ok, "a quarter of the limit, FleetSize being 4")
	assert.Equal(t, int64(3), s.calls.Load(), "the breaker opened after three failures")
}
