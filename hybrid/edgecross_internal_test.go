package hybrid

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

// windowFleet is a Syncer for one node on sliding windows of a second:
// it counts what it is told was consumed, grants up to 100, says the key
// is far under its limit, and dates the window's end by the clock it
// reads before the round trip (rtt, during which hook runs).
type windowFleet struct {
	mu       sync.Mutex
	clk      *clock.Manual
	consumed int64
	fail     bool
	rtt      time.Duration
	hook     func()
}

func (f *windowFleet) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, fleet.ErrUnreachable
	}
	w := int64(time.Second)
	now := f.clk.Now().UnixNano()
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i, u := range req.Keys {
		f.consumed += u.Consumed
		resp.Grants[i] = fleet.Grant{Lease: min(u.Demand, 100), TTL: 10 * time.Second, Remaining: 900, Nodes: 1, Weight: 1,
			ResetAfter: time.Duration(2*w - now%w)}
	}
	f.clk.Advance(f.rtt)
	if h := f.hook; h != nil {
		f.hook = nil
		f.mu.Unlock()
		h()
		f.mu.Lock()
	}
	return resp, nil
}

func (f *windowFleet) reported() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.consumed
}

// edgeFleet is a ManualSync Limiter on a windowFleet, with a key "k"
// synced at 50 requests a second for 2.5 windows, and a func that asks
// for one decision on it and counts what it admits.
func edgeFleet(t *testing.T) (l *Limiter, f *windowFleet, clk *clock.Manual, allow func() bool, admitted *int64) {
	t.Helper()
	clk = clock.NewManual(time.Unix(1_700_000_000, 0))
	f = &windowFleet{clk: clk}
	l, err := New(Config{Node: "n", Syncer: f, ManualSync: true, HotKeyRate: -1, Clock: clk, Interval: 100 * time.Millisecond,
		Policies: []Policy{{Name: "p", Limit: 1000, Window: time.Second, Algorithm: local.SlidingWindow}}})
	require.NoError(t, err)
	admitted = new(int64)
	allow = func() bool {
		d, err := l.Allow("k")
		require.NoError(t, err)
		if d.Allowed() {
			*admitted++
		}
		return d.Allowed()
	}
	for range 25 {
		for range 5 {
			allow()
		}
		require.NoError(t, l.SyncOnce(context.Background()))
		clk.Advance(100 * time.Millisecond)
	}
	return l, f, clk, allow, admitted
}

// untilEdge is how long from the clock's now to the next edge of a
// window of a second.
func untilEdge(clk *clock.Manual) time.Duration {
	w := int64(time.Second)
	return time.Duration(w - clk.Now().UnixNano()%w)
}

// TestCloseReportsTheCredit crosses an edge on the credit and closes:
// Close's sync reports everything, the credit's spending included (it
// reported up to the crossing, and no grant came to take the rest: 2 of
// 117 never reached the fleet).
func TestCloseReportsTheCredit(t *testing.T) {
	t.Parallel()
	l, f, clk, allow, admitted := edgeFleet(t)
	clk.Advance(untilEdge(clk) + time.Millisecond)
	for range 5 {
		allow()
	}
	k, _ := l.keys.Load("k")
	require.True(t, k.pace.crossed(), "crossed on the credit")
	require.NoError(t, l.Close())
	assert.Equal(t, *admitted, f.reported())
}

// TestLateGrantLendsNoSecondCredit has a sync sent 5 ms before an edge
// answered 10 ms later, past it: the key crosses on its credit during
// the round trip, and the grant, lapsed when it comes, must not lend it a
// second credit in the same window (it did: the node spent the first
// credit, then the second, before any grant of the new window). Every
// admission is reported once all the same.
func TestLateGrantLendsNoSecondCredit(t *testing.T) {
	t.Parallel()
	l, f, clk, allow, admitted := edgeFleet(t)
	clk.Advance(untilEdge(clk) - 5*time.Millisecond)
	k, _ := l.keys.Load("k")
	credit := int64(k.pace.edge.Load())
	require.Positive(t, credit)
	require.False(t, k.pace.crossed())
	past := int64(0)
	f.mu.Lock()
	f.rtt = 10 * time.Millisecond
	f.hook = func() {
		for allow() && past <= 1000 {
			past++
		}
	}
	f.mu.Unlock()
	require.NoError(t, l.SyncOnce(context.Background()))
	f.mu.Lock()
	f.rtt = 0
	f.mu.Unlock()
	for allow() && past <= 1000 {
		past++
	}
	assert.Positive(t, past, "the credit carried the key across")
	assert.LessOrEqual(t, past, credit, "admitted past the edge before a grant of the new window")
	for range 3 {
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(context.Background()))
	}
	assert.Equal(t, *admitted, f.reported())
	require.NoError(t, l.Close())
}

// TestFailedSyncAfterCrossing has the sync after a crossing fail: the
// credit stands, the marks stay at the crossing for the next sync, and
// every admission is reported once when the fleet is back.
func TestFailedSyncAfterCrossing(t *testing.T) {
	t.Parallel()
	l, f, clk, allow, admitted := edgeFleet(t)
	clk.Advance(untilEdge(clk) + time.Millisecond)
	allow()
	f.mu.Lock()
	f.fail = true
	f.mu.Unlock()
	_ = l.SyncOnce(context.Background())
	for n := 0; allow() && n < 1000; n++ {
	}
	f.mu.Lock()
	f.fail = false
	f.mu.Unlock()
	for range 5 {
		clk.Advance(100 * time.Millisecond)
		for range 5 {
			allow()
		}
		require.NoError(t, l.SyncOnce(context.Background()))
	}
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(context.Background()))
	assert.Equal(t, *admitted, f.reported())
	require.NoError(t, l.Close())
}

// ttlFleet grants a sliding window's key its demand for ttl, its window's
// edge an hour away, far under its limit.
type ttlFleet struct{ ttl time.Duration }

func (f ttlFleet) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i, u := range req.Keys {
		resp.Grants[i] = fleet.Grant{Lease: u.Demand, TTL: f.ttl, Remaining: 1 << 30, Nodes: 1, Weight: 1, ResetAfter: 2 * time.Hour}
	}
	return resp, nil
}

// TestSlidingRestsOnlyOnARestGrant: a sliding window's key rests only on
// a lease Redis granted to rest on (a TTL past two intervals). Rested on
// any lease covering the next interval, a key of a plain grant skipped
// rounds past Redis's stale horizon.
func TestSlidingRestsOnlyOnARestGrant(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	for _, c := range []struct {
		ttl  time.Duration
		rest bool
	}{{2 * interval, false}, {time.Minute, true}} {
		clk := clock.NewManual(time.Unix(1_700_000_000, 0))
		l, err := New(Config{Node: "n", Syncer: ttlFleet{c.ttl}, ManualSync: true, HotKeyRate: -1, Clock: clk, Interval: interval,
			Policies: []Policy{{Name: "p", Limit: 1 << 30, Window: time.Hour, Algorithm: local.SlidingWindow}}})
		require.NoError(t, err)
		for range restSyncs + 2 {
			_, err := l.Allow("k")
			require.NoError(t, err)
			require.NoError(t, l.SyncOnce(context.Background()))
			clk.Advance(interval / 10)
		}
		k, _ := l.keys.Load("k")
		l.syncMu.Lock()
		rests := l.rests(k, l.now(), false)
		l.syncMu.Unlock()
		assert.Equal(t, c.rest, rests, "a grant of %v", c.ttl)
		require.NoError(t, l.Close())
	}
}
