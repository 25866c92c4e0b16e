package hybrid_test

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// offerLimit offers n requests for key under the call's limit and burst,
// and counts what was admitted.
func offerLimit(t *testing.T, l *hybrid.Limiter, key string, n int, limit, burst int64) int {
	t.Helper()
	got := 0
	for range n {
		d, err := l.AllowNLimit(key, 1, limit, burst)
		require.NoError(t, err)
		if d.Allowed() {
			got++
		}
	}
	return got
}

// TestAllowNLimitRefusesWhatNoPolicyHolds: limits from the caller (a
// customer's row in the caller's database) that no policy could hold
// are refused with ErrInvalidLimit, for a new key and for one in use,
// and change nothing: no key is made, and a key in use keeps its limit.
// So are keys whose policy cannot take a limit per call.
func TestAllowNLimitRefusesWhatNoPolicyHolds(t *testing.T) {
	t.Parallel()
	l, _ := manual(t, hybrid.Config{Syncer: redisSyncer(t, redistest.StartServer(t)), Policies: []hybrid.Policy{
		{Name: "api", Limit: 100, Window: time.Hour},
		{Name: "local", Prefix: "local:", Mode: hybrid.Local, Limit: 100, Window: time.Hour},
		{Name: "rate", Prefix: "rate:", Rate: 10, Burst: 10},
	}})
	for _, tt := range []struct {
		name         string
		limit, burst int64
	}{
		{"zero", 0, 0},
		{"negative", -5, 0},
		{"min int64", math.MinInt64, 0},
		{"negative burst", 10, -1},
		{"capacity past 2^31-1", 1 << 40, 0},
		{"burst past 2^31-1", 10, 1 << 31},
		{"max int64", math.MaxInt64, math.MaxInt64},
	} {
		if tt.name == "zero" { // a key in use under 3, all of it spent
			offerLimit(t, l, "used", 1, 3, 0)
			require.NoError(t, l.SyncOnce(context.Background()))
			require.Equal(t, 2, offerLimit(t, l, "used", 2, 3, 0))
		}
		for _, key := range []string{"new-" + tt.name, "used"} {
			d, err := l.AllowNLimit(key, 1, tt.limit, tt.burst)
			require.ErrorIs(t, err, hybrid.ErrInvalidLimit, "%s, %s", tt.name, key)
			assert.False(t, d.Allowed(), tt.name)
		}
	}
	assert.Equal(t, 1, l.Len(), "no key made for a refused limit")
	require.NoError(t, l.SyncOnce(context.Background()))
	assert.Zero(t, offerLimit(t, l, "used", 5, 3, 0), "the key in use kept its limit of 3, spent")

	_, err := l.AllowNLimit("local:k", 1, 5, 0)
	require.ErrorIs(t, err, hybrid.ErrInvalidLimit, "a Local policy")
	_, err = l.AllowNLimit("rate:k", 1, 5, 0)
	require.ErrorIs(t, err, hybrid.ErrInvalidLimit, "a policy given by Rate")
}

// TestAllowNLimitOnAFleet: two nodes on a real Redis give one key a
// limit per call, far below its policy's. Together they admit the
// call's limit, not the policy's; raised by the calls, the key gets
// what the new limit adds to what it spent, within one sync; lowered,
// nothing more. Strict keys take the call's limit at once.
func TestAllowNLimitOnAFleet(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	for _, mode := range []hybrid.Mode{hybrid.Hybrid, hybrid.Strict} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			p := hybrid.Policy{Name: "api", Prefix: mode.String() + ":", Mode: mode, Limit: 1000, Window: time.Hour}
			node := func(name string) *hybrid.Limiter {
				// Timeouts past what a loaded CI takes: a Strict decision
				// past its default 50 ms failed static, each node at the
				// call's whole limit (40 admitted of 20), and a sync past
				// its 100 ms lost its grant (12).
				l, err := hybrid.New(hybrid.Config{Node: name, Syncer: redisSyncer(t, s), Policies: []hybrid.Policy{p},
					ManualSync: true, Clock: clock.NewManual(epoch), SyncTimeout: 2 * time.Second, StrictTimeout: 2 * time.Second})
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				return l
			}
			a, b := node("a"), node("b")
			ctx := context.Background()
			key := p.Prefix + "customer-7"
			round := func(limit int64) int {
				got := 0
				for range 5 {
					got += offerLimit(t, a, key, 10, limit, 0) + offerLimit(t, b, key, 10, limit, 0)
					require.NoError(t, a.SyncOnce(ctx))
					require.NoError(t, b.SyncOnce(ctx))
				}
				return got
			}
			assert.Equal(t, 20, round(20), "the call's limit of 20, not the policy's 1,000")
			d, err := a.AllowNLimit(key, 0, 20, 0)
			require.NoError(t, err)
			assert.Equal(t, int64(20), d.Limit())
			assert.Equal(t, 10, round(30), "raised to 30: what it adds to the 20 spent")
			assert.Zero(t, round(5), "lowered to 5: spent")
			st := a.Stats().Policies[0]
			assert.Equal(t, "api", st.Name, "counted under its policy")
			assert.NotZero(t, st.Admitted)
		})
	}
}

// TestAllowNLimitKeepsThroughPolicyChanges: a key's limit from calls
// stays across SetPolicies and SetLoadFactor, which scales it as it
// scales the policy's.
func TestAllowNLimitKeepsThroughPolicyChanges(t *testing.T) {
	t.Parallel()
	l, _ := manual(t, hybrid.Config{Syncer: redisSyncer(t, redistest.StartServer(t)), Policies: []hybrid.Policy{{Name: "api", Limit: 1000, Window: time.Hour}}})
	ctx := context.Background()
	offerLimit(t, l, "k", 4, 40, 0)
	require.NoError(t, l.SyncOnce(ctx))
	require.NoError(t, l.SetPolicies([]hybrid.Policy{{Name: "api", Limit: 2000, Window: time.Hour}}))
	require.NoError(t, l.SyncOnce(ctx))
	d, err := l.Allow("k") // no limit given: the key keeps the call's
	require.NoError(t, err)
	assert.Equal(t, int64(40), d.Limit())
	require.NoError(t, l.SetLoadFactor(0.5))
	require.NoError(t, l.SyncOnce(ctx))
	d, err = l.AllowNLimit("k", 0, 40, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(20), d.Limit(), "half of 40")
}

// TestAllowNLimitLoadFactorOnATemplate: a policy that is a template for
// limits given per call (its own limit 1) is left as it was by a load
// factor of 0.5 (1 halved is 1), but its keys' limits are halved.
func TestAllowNLimitLoadFactorOnATemplate(t *testing.T) {
	t.Parallel()
	l, _ := manual(t, hybrid.Config{Syncer: redisSyncer(t, redistest.StartServer(t)), Policies: []hybrid.Policy{{Name: "c", Limit: 1, Window: time.Minute}}})
	ctx := context.Background()
	_, err := l.AllowNLimit("k", 0, 100, 0)
	require.NoError(t, err)
	require.NoError(t, l.SyncOnce(ctx))
	require.NoError(t, l.SetLoadFactor(0.5))
	require.NoError(t, l.SyncOnce(ctx))
	d, err := l.AllowNLimit("k", 0, 100, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(50), d.Limit())
	require.NoError(t, l.SetLoadFactor(1))
	require.NoError(t, l.SyncOnce(ctx))
	d, err = l.AllowNLimit("k", 0, 100, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), d.Limit(), "and back")
}

// FuzzCallLimits drives one Hybrid key with arbitrary limits per call
// (negative, zero, huge, changing at every call), arbitrary costs and
// syncs at arbitrary points with arbitrary leases. Invariants, end to
// end: nothing panics; a limit no policy holds is refused with
// ErrInvalidLimit and admits nothing; what the node admitted never
// exceeds its starter credit plus every lease the fleet granted; a
// Decision never reports a limit the calls did not give; and once
// synced, the fleet has been told of exactly what was admitted.
func FuzzCallLimits(f *testing.F) {
	f.Add([]byte{0, 10, 0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 0, 0, 0})
	f.Add([]byte{0, 255, 255, 255, 255, 0, 0, 0, 128, 3, 0, 0, 0, 1})
	f.Add([]byte{0, 5, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		pos := 0
		u32 := func() uint32 {
			var b [4]byte
			pos += copy(b[:], ops[min(pos, len(ops)):])
			return binary.LittleEndian.Uint32(b[:])
		}
		nodes := &ledger{next: func() int64 { return int64(u32() % (math.MaxUint32 >> 1)) }}
		clk := clock.NewManual(epoch)
		l, err := hybrid.New(hybrid.Config{
			Node: "n1", Syncer: nodes, ManualSync: true, Clock: clk, HotKeyRate: -1,
			Policies: []hybrid.Policy{{Name: "p", Algorithm: local.TokenBucket, Limit: 1 << 20, Window: time.Second}},
		})
		require.NoError(t, err)
		defer l.Close()
		ctx := context.Background()
		var admitted, credit int64
		given := map[int64]bool{1 << 20: true}
		for pos < len(ops) {
			op := ops[pos]
			pos++
			switch op % 3 {
			case 0, 1:
				limit, burst, cost := int64(int32(u32())), int64(int32(u32()))>>int(op>>4), int(int16(u32()))
				d, err := l.AllowNLimit("k", cost, limit, burst)
				if limit < 1 || burst < 0 {
					require.ErrorIs(t, err, hybrid.ErrInvalidLimit)
				}
				if err != nil {
					require.ErrorIs(t, err, hybrid.ErrInvalidLimit)
					require.False(t, d.Allowed())
					continue
				}
				if burst == 0 {
					given[limit] = true // a token bucket's capacity: the burst, or the limit
				} else {
					given[burst] = true
				}
				require.True(t, given[d.Limit()], "a limit no call gave: %d", d.Limit())
				if credit == 0 {
					credit = d.Limit() // at most the first limit's capacity (the starter)
				}
				if d.Allowed() && cost > 0 {
					admitted += int64(cost)
				}
			case 2:
				clk.Advance(time.Duration(op>>3+1) * time.Millisecond)
				require.NoError(t, l.SyncOnce(ctx))
			}
			require.LessOrEqual(t, admitted, credit+nodes.granted, "admitted past every lease granted")
		}
		clk.Advance(time.Millisecond)
		require.NoError(t, l.SyncOnce(ctx))
		require.Equal(t, admitted, nodes.consumed, "the fleet was told of what was admitted")
	})
}
