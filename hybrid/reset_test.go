package hybrid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestReset: a key spent on two nodes of a real Redis is reset on one;
// at their next syncs both admit from a full bucket again, and another
// key is untouched.
func TestReset(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Limit: 100, Window: time.Hour}
	node := func(name string) (*hybrid.Limiter, *clock.Manual) {
		clk := clock.NewManual(epoch)
		l, err := hybrid.New(hybrid.Config{Node: name, Interval: 100 * time.Millisecond, ManualSync: true, Clock: clk,
			Syncer: redisSyncer(t, s), Policies: []hybrid.Policy{p}})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		return l, clk
	}
	a, clkA := node("a")
	b, clkB := node("b")
	ctx := context.Background()
	spend := func(key string) int {
		n := 0
		for range 5 {
			for _, l := range []*hybrid.Limiter{a, b} {
				require.NoError(t, l.SyncOnce(ctx))
				got, _ := offerN(t, l, key, 200)
				n += got
			}
			clkA.Advance(time.Millisecond)
			clkB.Advance(time.Millisecond)
		}
		return n
	}
	// A new key's first burst on each node comes from its starter credit
	// (its part of the burst), and its first lease is capped to what is
	// left of that part (demand): "other" admitted 150 of a burst of 100
	// before, the first node to sync leased the other's unreported
	// starter. After a Reset, a node that held the key is leased the
	// fresh bucket beside the other's new starter: up to 150.
	first, other := spend("k"), spend("other")
	t.Logf("admitted: %d of k, %d of other, then nothing", first, other)
	require.GreaterOrEqual(t, first, 97, "the bucket, spent")
	require.InDelta(t, 100, other, 3, "the starters and first leases hold the burst")
	require.Zero(t, spend("k"), "spent")
	require.NoError(t, a.Reset(ctx, "k"))
	again := spend("k")
	t.Logf("after Reset: %d of k", again)
	assert.GreaterOrEqual(t, again, 97, "a full bucket again, on both nodes")
	assert.LessOrEqual(t, again, 160)
	assert.Zero(t, spend("other"), "another key untouched")
}

// TestResetWithoutFleetReset: a Syncer that cannot reset a key for the
// fleet: this node's state is reset and the error says so; a Local
// policy's key needs no fleet.
func TestResetWithoutFleetReset(t *testing.T) {
	t.Parallel()
	s, _ := fixedLease(5)
	l, _ := stepped(t, s, fleet.DemandWeighted,
		hybrid.Policy{Name: "h", Prefix: "h:", Limit: 1000, Window: time.Second},
		hybrid.Policy{Name: "l", Prefix: "l:", Mode: hybrid.Local, Limit: 3, Window: time.Hour})
	require.NoError(t, l.SyncOnce(context.Background()))
	n, _ := offerN(t, l, "l:x", 10)
	require.Equal(t, 3, n)
	require.NoError(t, l.Reset(context.Background(), "l:x"))
	n, _ = offerN(t, l, "l:x", 10)
	assert.Equal(t, 3, n, "a Local key's bucket is full again")
	_, _ = offerN(t, l, "h:x", 10)
	err := l.Reset(context.Background(), "h:x")
	assert.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
	assert.Equal(t, 0, hybrid.NodesOf(l, "h:x"), "this node's state is gone")
}
