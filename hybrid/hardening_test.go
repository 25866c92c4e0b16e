package hybrid_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// fixedLease is a fleet that grants every key lease tokens at each sync,
// whatever it asked for, and records what was reported consumed.
func fixedLease(lease int64) (syncFunc, *int64) {
	consumed := new(int64)
	return func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i, u := range req.Keys {
			*consumed += u.Consumed
			resp.Grants[i] = fleet.Grant{Lease: lease, TTL: time.Hour, Remaining: 0, Nodes: 1, Weight: 1}
		}
		return resp, nil
	}, consumed
}

// drainKey admits key until refused and returns how many were admitted.
func drainKey(t *testing.T, l *hybrid.Limiter, key string) int {
	t.Helper()
	n := 0
	for ; n < 1_000_000; n++ {
		d, err := l.Allow(key)
		require.NoError(t, err)
		if !d.Allowed() {
			return n
		}
	}
	t.Fatalf("key %q was never refused", key)
	return n
}

// TestCancelCannotMint checks that no sequence of TakeN and
// Cancel lets a node admit more than its lease: Cancel gives back once,
// and a cost of zero or less takes and gives back nothing. Before the
// fix, one TakeN and 1,000 Cancels admitted 1,099 against a lease of 100,
// and TakeN(-50) with a Cancel raised the allowance past 4 billion.
func TestCancelCannotMint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		take func(l *hybrid.Limiter) (*hybrid.Reservation, error)
	}{
		{"TakeN(1)", func(l *hybrid.Limiter) (*hybrid.Reservation, error) { return l.TakeN("k", 1) }},
		{"TakeN(-50)", func(l *hybrid.Limiter) (*hybrid.Reservation, error) { return l.TakeN("k", -50) }},
		{"TakeN(0)", func(l *hybrid.Limiter) (*hybrid.Reservation, error) { return l.TakeN("k", 0) }},
		{"TakeN(MinInt32)", func(l *hybrid.Limiter) (*hybrid.Reservation, error) { return l.TakeN("k", -1<<31) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, consumed := fixedLease(100)
			l, clk := stepped(t, s, fleet.DemandWeighted)
			_, err := l.Allow("k") // the starter credit
			require.NoError(t, err)
			clk.Advance(10 * time.Millisecond)
			require.NoError(t, l.SyncOnce(context.Background()))

			r, err := tc.take(l)
			require.NoError(t, err)
			for range 1000 {
				r.Cancel()
			}
			admitted := drainKey(t, l, "k")
			assert.LessOrEqual(t, admitted, 100, "admitted from a lease of 100")
			clk.Advance(100 * time.Millisecond)
			require.NoError(t, l.SyncOnce(context.Background()))
			assert.GreaterOrEqual(t, *consumed, int64(1+admitted), "every admission is reported")
		})
	}
}

// TestErrorRefuses checks that a call that fails comes with a refusing
// Decision or Reservation, so that `if err == nil && !d.Allowed()`
// cannot admit a request the Limiter could not decide.
func TestErrorRefuses(t *testing.T) {
	t.Parallel()
	l, _ := manual(t, hybrid.Config{MaxKeyLen: 8, Policies: []hybrid.Policy{
		{Name: "api", Prefix: "api:", Mode: hybrid.Local, Limit: 10, Window: time.Second},
	}})
	for _, key := range []string{"api:much-too-long", "other"} {
		d, err := l.Allow(key)
		require.Error(t, err, key)
		assert.False(t, d.Allowed(), "Allow(%q) failed with %v but its Decision admits", key, err)
		d, err = l.AllowN(key, 1)
		require.Error(t, err)
		assert.False(t, d.Allowed())
		r, err := l.TakeN(key, 1)
		require.Error(t, err)
		require.NotNil(t, r)
		assert.False(t, r.Decision().Allowed())
		r.Cancel()
	}
}

// TestWaitHonoursDoneContext checks that Wait returns the context's error
// when the context is already done, even if the request could be
// admitted at once, as golang.org/x/time/rate does, and takes nothing.
func TestWaitHonoursDoneContext(t *testing.T) {
	t.Parallel()
	s, _ := fixedLease(100)
	l, clk := stepped(t, s, fleet.DemandWeighted,
		hybrid.Policy{Name: "h", Prefix: "h:", Limit: 1000, Window: time.Second},
		hybrid.Policy{Name: "l", Prefix: "l:", Mode: hybrid.Local, Limit: 1000, Window: time.Second})
	_, err := l.Allow("h:k")
	require.NoError(t, err)
	clk.Advance(10 * time.Millisecond)
	require.NoError(t, l.SyncOnce(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, key := range []string{"h:k", "l:k"} {
		before := drainKeyDry(t, l, key)
		require.ErrorIs(t, l.Wait(ctx, key), context.Canceled, key)
		assert.Equal(t, before, drainKeyDry(t, l, key), "%s: Wait on a done context took tokens", key)
	}
}

// drainKeyDry is what key has left, read with a cost of 0.
func drainKeyDry(t *testing.T, l *hybrid.Limiter, key string) int64 {
	t.Helper()
	d, err := l.AllowN(key, 0)
	require.NoError(t, err)
	return d.Remaining()
}

// TestClosedLimiterFollowsFailMode checks that after Close a key seen for
// the first time is decided by its policy's FailMode, as an unreachable
// fleet's would be, not from a starter credit the fleet never granted.
func TestClosedLimiterFollowsFailMode(t *testing.T) {
	t.Parallel()
	s, _ := fixedLease(100)
	l, _ := stepped(t, s, fleet.DemandWeighted,
		hybrid.Policy{Name: "closed", Prefix: "c:", Limit: 1000, Window: time.Second, OnUnreachable: hybrid.FailClosed})
	require.NoError(t, l.Close())
	d, err := l.Allow("c:new")
	require.NoError(t, err)
	assert.False(t, d.Allowed(), "a FailClosed key after Close")
	assert.True(t, d.Degraded())
}

// strictAnswer is a Strict store that answers every decision with d.
type strictAnswer struct {
	*scripted
	d store.Decision
}

func (s *strictAnswer) Allow(context.Context, string, fleet.Limit, int64) (store.Decision, error) {
	return s.d, nil
}

// TestStrictReadsAllowed checks that a Strict decision the store refused
// is refused, whatever its RetryAfter says: a store that answers
// Allowed false with RetryAfter 0 (a corrupt value read back) must not
// admit.
func TestStrictReadsAllowed(t *testing.T) {
	t.Parallel()
	s := &strictAnswer{scripted: newScripted(0), d: store.Decision{Allowed: false}}
	l, _ := manual(t, hybrid.Config{Syncer: s, Policies: []hybrid.Policy{
		{Name: "strict", Mode: hybrid.Strict, Limit: 100, Window: time.Second},
	}})
	d, err := l.Allow("k")
	require.NoError(t, err)
	assert.False(t, d.Allowed())
	assert.Positive(t, d.RetryAfter())
}

// TestTypedNilSyncer checks that New refuses a Syncer interface holding a
// nil pointer, as NewRedis returns with its error, instead of panicking
// in the first background sync.
func TestTypedNilSyncer(t *testing.T) {
	t.Parallel()
	var r *global.Redis
	_, err := hybrid.New(hybrid.Config{Syncer: r, Policies: []hybrid.Policy{{Name: "p", Limit: 1, Window: time.Second}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Config.Syncer")
	_, err = hybrid.New(hybrid.Config{Syncer: newScripted(0), Failover: r, Policies: []hybrid.Policy{{Name: "p", Limit: 1, Window: time.Second}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Config.Failover")
}

// TestLargeCostsCounted checks that every cost a policy accepts is
// reported to the fleet exactly, however much is admitted between two
// syncs: three FailOpen admissions of the largest capacity during an
// outage (over 6 billion) reach the fleet in full once it is back. Before
// the fix, spending went through a 32-bit counter read as int32, and
// whatever passed 2^31 between two reports was never reported.
func TestLargeCostsCounted(t *testing.T) {
	t.Parallel()
	const capacity = 1<<31 - 1
	s := newScripted(0, "k")
	l, clk := stepped(t, s, fleet.DemandWeighted,
		hybrid.Policy{Name: "open", Rate: 1e6, Burst: capacity, OnUnreachable: hybrid.FailOpen})
	ctx := context.Background()
	_, err := l.AllowN("k", 0)
	require.NoError(t, err)
	s.set(errDown, 1)
	require.Error(t, l.SyncOnce(ctx))
	for range 3 {
		d, err := l.AllowN("k", capacity)
		require.NoError(t, err)
		require.True(t, d.Allowed())
		require.True(t, d.Degraded())
	}
	s.set(nil, 1)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, int64(3*capacity), s.consumed("k"))

	_, err = hybrid.New(hybrid.Config{Syncer: s, Policies: []hybrid.Policy{{Name: "big", Rate: 1e6, Burst: capacity + 1}}})
	require.ErrorContains(t, err, "Burst is 2147483648")
}

// TestCapacityErrorNamesField checks that a capacity too large for a
// Hybrid policy is refused naming the field the user set.
func TestCapacityErrorNamesField(t *testing.T) {
	t.Parallel()
	s := newScripted(0)
	_, err := hybrid.New(hybrid.Config{Syncer: s, Policies: []hybrid.Policy{{Name: "p", Limit: math.MaxInt64, Window: time.Second}}})
	require.ErrorContains(t, err, "Limit is 9223372036854775807")
	_, err = hybrid.New(hybrid.Config{Syncer: s, Policies: []hybrid.Policy{{Name: "p", Limit: 10, Burst: 1 << 40, Window: time.Second}}})
	require.ErrorContains(t, err, "Burst is 1099511627776")
}

// TestFallbackStartsFromShare checks that when the fleet is lost, the
// fail-static bucket starts from this node's share of what the fleet had
// left at the last sync, not from a full burst, on the real clock, whose
// reads move between the bucket's creation and its first drain. Before
// the fix the drain was dated before the bucket and often refused, so the
// bucket started full.
func TestFallbackStartsFromShare(t *testing.T) {
	t.Parallel()
	const keys = 1000
	down := false
	s := syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		if down {
			return nil, errDown
		}
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i := range req.Keys {
			resp.Grants[i] = fleet.Grant{Lease: 0, TTL: time.Millisecond, Remaining: 0, Used: 100, Nodes: 4, Weight: 0.25}
		}
		return resp, nil
	})
	// 100 per 100 s: the fallback refills a token every 4 s, so that a
	// key reached late in the loop below has refilled none. At 100/s it
	// refilled one every 40 ms, and a loaded CI's -race took that long
	// to reach the later keys (744 admitted).
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: s, ManualSync: true, MaxKeys: 2 * keys,
		Policies: []hybrid.Policy{{Name: "p", Limit: 100, Window: 100 * time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ctx := context.Background()
	for i := range keys {
		_, err = l.AllowN(fmt.Sprint("k", i), 1) // spends the starter credit
		require.NoError(t, err)
	}
	require.NoError(t, l.SyncOnce(ctx))
	down = true
	time.Sleep(2 * time.Millisecond) // the leases' TTL
	require.Error(t, l.SyncOnce(ctx))
	admitted := 0
	for i := range keys {
		// The fleet had nothing left: the node's bucket starts empty and
		// refills at a quarter of 1/s, a token every 4 s.
		d, err := l.Allow(fmt.Sprint("k", i))
		require.NoError(t, err)
		require.True(t, d.Degraded())
		if d.Allowed() {
			admitted++
		}
	}
	assert.LessOrEqual(t, admitted, keys/100, "keys whose fallback started with tokens the fleet did not have")
}

// TestCancelDuringSync: a Reservation cancelled while a sync is in
// flight (between the sync's read of spent and its grant) must not cost
// the node the lease the sync brings: the grant reads spent below its
// mark as a wrapped 32-bit difference, about 4 billion spent, and installs
// an allowance of 0.
func TestCancelDuringSync(t *testing.T) {
	t.Parallel()
	for _, striped := range []bool{false, true} {
		t.Run(fmt.Sprint("striped=", striped), func(t *testing.T) {
			t.Parallel()
			var held *hybrid.Reservation
			s := syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
				if held != nil {
					held.Cancel() // a request on another goroutine gives its tokens back
					held = nil
				}
				resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
				for i := range req.Keys {
					resp.Grants[i] = fleet.Grant{Lease: 100, TTL: time.Hour, Remaining: 0, Nodes: 1, Weight: 1}
				}
				return resp, nil
			})
			cfg := hybrid.Config{Syncer: s, HotKeyRate: -1, Policies: []hybrid.Policy{{Name: "p", Limit: 1000, Window: time.Second}}}
			if striped {
				cfg.HotKeyRate, cfg.HotKeyStripes = 1, 4
			}
			l, clk := manual(t, cfg)
			ctx := context.Background()
			_, err := l.AllowN("k", 0)
			require.NoError(t, err)
			for range 3 {
				admit(t, l, "k", 50)
				clk.Advance(100 * time.Millisecond)
				require.NoError(t, l.SyncOnce(ctx))
			}
			if striped {
				require.Len(t, l.HotKeys(), 1)
			}
			r, err := l.TakeN("k", 10)
			require.NoError(t, err)
			require.True(t, r.Decision().Allowed())
			held = r
			clk.Advance(100 * time.Millisecond)
			require.NoError(t, l.SyncOnce(ctx))
			assert.GreaterOrEqual(t, admit(t, l, "k", 200), 100, "admitted from the lease of 100 just granted")
		})
	}
}

// fullCapacity is the largest capacity a Hybrid policy takes.
const fullCapacity = 1<<31 - 1

// fullLease returns a Limiter whose key "k" holds a lease of the largest
// capacity from a fleet that grants it at every sync, unstriped, and what
// the fleet is told was consumed.
func fullLease(t *testing.T) (*hybrid.Limiter, *clock.Manual, *int64) {
	t.Helper()
	s, consumed := fixedLease(fullCapacity)
	l, clk := manual(t, hybrid.Config{Syncer: s, HotKeyRate: -1, Policies: []hybrid.Policy{{Name: "big", Rate: 1e9, Burst: fullCapacity}}})
	_, err := l.AllowN("k", 0)
	require.NoError(t, err)
	require.NoError(t, l.SyncOnce(context.Background()))
	return l, clk, consumed
}

// TestFullLeasesCounted spends five leases of the largest capacity, each
// in full between two syncs: the lease word's 32-bit spent wraps, and the
// sync loop's 64-bit extension must report every token.
func TestFullLeasesCounted(t *testing.T) {
	t.Parallel()
	l, clk, consumed := fullLease(t)
	ctx := context.Background()
	for range 5 {
		d, err := l.AllowN("k", fullCapacity)
		require.NoError(t, err)
		require.True(t, d.Allowed())
		require.False(t, d.Degraded())
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(ctx))
	}
	assert.Equal(t, int64(5*fullCapacity), *consumed)
}

// TestCancelAfterGrantCounted gives back a take after a sync installed a
// full lease: the allowance cannot grow past the largest, so nothing comes
// back, and spent must not fall either, or the take would go unreported.
func TestCancelAfterGrantCounted(t *testing.T) {
	t.Parallel()
	l, clk, consumed := fullLease(t)
	ctx := context.Background()
	r, err := l.TakeN("k", 10)
	require.NoError(t, err)
	require.True(t, r.Decision().Allowed())
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx)) // reports the 10; a full lease again
	r.Cancel()                          // the allowance is full: nothing comes back
	d, err := l.AllowN("k", fullCapacity)
	require.NoError(t, err)
	require.True(t, d.Allowed())
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, int64(10+fullCapacity), *consumed)
}

// TestKeyErrorReportKept checks that consumption the fleet refused with
// a key's error is reported again at the next sync, not dropped.
func TestKeyErrorReportKept(t *testing.T) {
	t.Parallel()
	fail := true
	var got []int64
	s := syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i, u := range req.Keys {
			got = append(got, u.Consumed)
			if fail {
				resp.Grants[i].Err = fmt.Errorf("%w: WRONGTYPE", fleet.ErrInvalid)
				continue
			}
			resp.Grants[i] = fleet.Grant{Lease: 100, TTL: time.Hour, Nodes: 1, Weight: 1}
		}
		return resp, nil
	})
	l, clk := stepped(t, s, fleet.DemandWeighted, hybrid.Policy{Name: "open", Limit: 1000, Window: time.Second, OnUnreachable: hybrid.FailOpen})
	ctx := context.Background()
	assert.Equal(t, 1, admit(t, l, "k", 5), "the starter credit")
	clk.Advance(10 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, 5, admit(t, l, "k", 5), "failing: FailOpen decides")
	fail = false
	clk.Advance(10 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, []int64{1, 6}, got, "refused, then reported again with the rest")
}

// countingStrict is a Strict store that answers every decision with d,
// or err, and counts the calls.
type countingStrict struct {
	*scripted
	d     store.Decision
	err   error
	calls int
}

func (s *countingStrict) Allow(context.Context, string, fleet.Limit, int64) (store.Decision, error) {
	s.calls++
	return s.d, s.err
}

// TestStrictKeyErrors checks that a Strict key the store answers with an
// error of the key's (corrupt state) is decided by its FailMode and
// counted in Health, without opening the breaker; and that a closed
// Limiter calls the store no more.
func TestStrictKeyErrors(t *testing.T) {
	t.Parallel()
	s := &countingStrict{scripted: newScripted(0), err: fmt.Errorf("%w: tat is nan", fleet.ErrCorrupt)}
	l, _ := manual(t, hybrid.Config{Syncer: s, FleetSize: 4, Policies: []hybrid.Policy{
		{Name: "strict", Mode: hybrid.Strict, Limit: 100, Window: time.Second},
	}})
	admitted := 0
	for range 50 {
		d, err := l.Allow("k")
		require.NoError(t, err)
		require.True(t, d.Degraded())
		if d.Allowed() {
			admitted++
		}
	}
	assert.Equal(t, 25, admitted, "FailStatic: a quarter, FleetSize 4")
	assert.Equal(t, 50, s.calls, "a key's error does not open the breaker")
	h := l.Health()
	assert.Equal(t, 1, h.FailingKeys)
	require.ErrorIs(t, h.KeyError, fleet.ErrCorrupt)

	s.err, s.d = nil, store.Decision{Allowed: true, Remaining: 10}
	d, err := l.Allow("k")
	require.NoError(t, err)
	assert.False(t, d.Degraded())
	assert.Zero(t, l.Health().FailingKeys, "answered again")

	require.NoError(t, l.Close())
	calls := s.calls
	d, err = l.Allow("k")
	require.NoError(t, err)
	assert.True(t, d.Degraded(), "a closed Limiter decides alone")
	assert.Equal(t, calls, s.calls, "and calls no store")
}
