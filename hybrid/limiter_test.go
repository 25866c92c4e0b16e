package hybrid_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

// scripted is a Syncer for unit tests of the hybrid logic: it records each
// Request and answers with grants from a per-key pool, or with err.
type scripted struct {
	mu    sync.Mutex
	reqs  []fleet.Request
	pool  map[string]int64 // tokens left to lease, per key
	nodes int
	err   error
	split time.Duration    // Response.Partitioned
	taken map[string]int64 // consumption reported by calls that succeeded
}

func newScripted(pool int64, keys ...string) *scripted {
	s := &scripted{pool: map[string]int64{}, nodes: 1, taken: map[string]int64{}}
	for _, k := range keys {
		s.pool[k] = pool
	}
	return s
}

func (s *scripted) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := *req
	cp.Keys = append([]fleet.Usage(nil), req.Keys...)
	s.reqs = append(s.reqs, cp)
	if s.err != nil {
		return nil, s.err
	}
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys)), Partitioned: s.split}
	for i, u := range req.Keys {
		s.taken[u.Key] += u.Consumed
		g := min(u.Demand, s.pool[u.Key])
		s.pool[u.Key] -= g
		resp.Grants[i] = fleet.Grant{Lease: g, TTL: 2 * req.Interval, Remaining: s.pool[u.Key], Nodes: s.nodes, Weight: 1 / float64(s.nodes)}
	}
	return resp, nil
}

func (s *scripted) last() fleet.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reqs[len(s.reqs)-1]
	return r.Keys[len(r.Keys)-1]
}

// calls is how many times Sync was called.
func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// consumed is the total consumption reported for key.
func (s *scripted) consumed(key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taken[key]
}

func (s *scripted) set(err error, nodes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err, s.nodes = err, nodes
}

var epoch = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// manual returns a Limiter on a manual clock whose syncs the test drives,
// with cfg's other fields as set (a 1000/s policy if none).
func manual(t *testing.T, cfg hybrid.Config) (*hybrid.Limiter, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(epoch)
	cfg.Node, cfg.Interval, cfg.ManualSync, cfg.Clock = "n1", 100*time.Millisecond, true, clk
	if cfg.Policies == nil {
		cfg.Policies = []hybrid.Policy{{Name: "api", Limit: 1000, Window: time.Second}}
	}
	l, err := hybrid.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, clk
}

// stepped is manual with a syncer, a share strategy and policies.
func stepped(t *testing.T, s fleet.Syncer, shares fleet.Shares, policies ...hybrid.Policy) (*hybrid.Limiter, *clock.Manual) {
	t.Helper()
	return manual(t, hybrid.Config{Syncer: s, Shares: shares, Policies: policies})
}

// offerN offers key n requests one by one and returns how many were
// admitted and whether the last decision was Degraded.
func offerN(t *testing.T, l *hybrid.Limiter, key string, n int) (admitted int, degraded bool) {
	t.Helper()
	for range n {
		d, err := l.Allow(key)
		require.NoError(t, err)
		if d.Allowed() {
			admitted++
		}
		degraded = d.Degraded()
	}
	return admitted, degraded
}

func admit(t *testing.T, l *hybrid.Limiter, key string, n int) int {
	t.Helper()
	ok := 0
	for range n {
		d, err := l.Allow(key)
		require.NoError(t, err)
		if d.Allowed() {
			ok++
		}
	}
	return ok
}

// TestLeaseAccounting steps one node through its first syncs and checks
// every number it reports and every allowance it installs.
func TestLeaseAccounting(t *testing.T) {
	t.Parallel()
	s := newScripted(1_000_000, "k")
	l, clk := stepped(t, s, fleet.DemandWeighted)
	ctx := context.Background()

	// A new key starts with the starter credit: 1% of one interval's
	// quota (1000/s * 100ms = 100) over one node: 1 token.
	assert.Equal(t, 1, admit(t, l, "k", 5))

	// The first sync reports the credit spent as consumption, and a
	// demand of 1.5x the offered rate: 5 offered in 10 ms (a sample spans
	// at least the early-sync gap, 10 ms) = 500/s, *0.1 s *1.5 = 75.
	clk.Advance(10 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	u := s.last()
	series := u.Series
	assert.NotZero(t, series, "reports are idempotent")
	u.Series = 0 // random
	assert.Equal(t, fleet.Usage{Key: "k", Limit: fleet.Limit{Limit: 1000, Window: time.Second, Burst: 1000}, Consumed: 1, Demand: 75, Hold: 10 * time.Second}, u, "asks to rest up to its IdleTimeout (see holdOf)")
	assert.Equal(t, 75, admit(t, l, "k", 80), "the lease of 75 is the allowance")

	// The next report carries the 75 consumed.
	clk.Advance(90 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, int64(75), s.last().Consumed)
	assert.Equal(t, int64(75), s.last().Total, "what the series counted since it began")
	assert.Equal(t, series, s.last().Series)
}

// TestGrantDuringRoundTrip checks that what is spent while a sync is in
// flight comes out of the new lease: the syncer spends on the node's
// behalf before it answers.
func TestGrantDuringRoundTrip(t *testing.T) {
	t.Parallel()
	var l *hybrid.Limiter
	inner := newScripted(1_000_000, "k")
	spent := 0
	s := syncFunc(func(ctx context.Context, req *fleet.Request) (*fleet.Response, error) {
		spent += admit(t, l, "k", 3) // admitted from the old allowance
		return inner.Sync(ctx, req)
	})
	l, clk := stepped(t, s, fleet.DemandWeighted)
	ctx := context.Background()
	admit(t, l, "k", 100)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx)) // no allowance left: nothing spent inside
	require.Equal(t, 0, spent)
	require.Equal(t, int64(150), inner.last().Demand) // 1000/s * 0.1 s * 1.5
	require.Equal(t, 100, admit(t, l, "k", 100))
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx)) // 3 spent inside, from the old allowance
	require.Equal(t, 3, spent)
	assert.Equal(t, int64(100), inner.last().Consumed, "the 3 spent inside the round trip wait for the next report")
	lease := inner.last().Demand
	assert.Equal(t, int(lease-3), admit(t, l, "k", int(lease)), "the 3 came out of the new lease")
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, lease, inner.last().Consumed, "3 + (lease - 3): reported once, not twice")
}

type syncFunc func(context.Context, *fleet.Request) (*fleet.Response, error)

func (f syncFunc) Sync(ctx context.Context, req *fleet.Request) (*fleet.Response, error) {
	return f(ctx, req)
}

// TestDemandShares checks the demand a node asks for under each strategy:
// DemandWeighted asks for its forecast with headroom, Equal caps it at what
// a bucket of 1/N of the rate and burst holds, and both keep a floor.
func TestDemandShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		shares  fleet.Shares
		nodes   int
		offered int // per 100ms interval
		want    int64
	}{
		// 400 offered per interval = 4000/s; *0.1 s *1.5 = 600, up to
		// the burst of 1000.
		{"weighted", fleet.DemandWeighted, 4, 400, 600},
		// Equal: the first lease may take the node's share of the
		// burst, 1000/4 = 250; once that is spent it gets its share of
		// the refill, 1000/s * 0.1 s / 4 nodes = 25 per interval.
		{"equal", fleet.Equal, 4, 400, 25},
		{"equal-under-share", fleet.Equal, 4, 10, 15},
		// Idle for an interval: the forecast decays but the floor, 1%
		// of 100/4 rounded up, stays.
		{"weighted-idle", fleet.DemandWeighted, 4, 0, 1},
		{"weighted-capped-at-burst", fleet.DemandWeighted, 1, 1000, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newScripted(1_000_000, "k")
			s.set(nil, tt.nodes)
			l, clk := stepped(t, s, tt.shares)
			ctx := context.Background()
			if tt.offered == 0 {
				admit(t, l, "k", 1)
			}
			// The first sync seeds the forecast with the first
			// interval's rate; the same rate after it keeps it exact.
			for range 4 {
				admit(t, l, "k", tt.offered)
				clk.Advance(100 * time.Millisecond)
				require.NoError(t, l.SyncOnce(ctx))
			}
			if tt.offered == 0 {
				clk.Advance(5 * time.Second) // the forecast decays to nothing
				require.NoError(t, l.SyncOnce(ctx))
			}
			assert.Equal(t, tt.want, s.last().Demand)
		})
	}
}

// TestFailModes cuts the fleet off and checks each FailMode: the lease is
// spent first, then FailStatic limits to the node's share, FailOpen admits,
// FailClosed refuses; and all of it is reported once the fleet is back.
func TestFailModes(t *testing.T) {
	t.Parallel()
	unreachable := fmt.Errorf("dial: %w", fleet.ErrUnreachable)
	tests := []struct {
		mode hybrid.FailMode
		want int // admitted of 100 once the lease has lapsed
	}{
		// Share 1/4 of limit 100 per second, burst 100: 25 at once.
		{hybrid.FailStatic, 25},
		{hybrid.FailOpen, 100},
		{hybrid.FailClosed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			t.Parallel()
			s := newScripted(1_000_000, "k")
			s.set(nil, 4)
			l, clk := stepped(t, s, fleet.DemandWeighted,
				hybrid.Policy{Name: "api", Limit: 100, Window: time.Second, OnUnreachable: tt.mode})
			ctx := context.Background()
			admit(t, l, "k", 1)
			clk.Advance(100 * time.Millisecond)
			require.NoError(t, l.SyncOnce(ctx))
			lease := s.last().Demand

			s.set(unreachable, 4)
			clk.Advance(100 * time.Millisecond)
			require.ErrorIs(t, l.SyncOnce(ctx), fleet.ErrUnreachable)
			// The lease stands until it lapses: it is spent first.
			d, err := l.Allow("k")
			require.NoError(t, err)
			assert.True(t, d.Allowed())
			assert.False(t, d.Degraded(), "spent from the lease")
			got := admit(t, l, "k", int(lease)-1)
			assert.Equal(t, int(lease)-1, got)

			clk.Advance(200 * time.Millisecond) // past the 2-interval TTL
			require.Error(t, l.SyncOnce(ctx))
			n := 0
			for range 100 {
				d, err := l.Allow("k")
				require.NoError(t, err)
				assert.True(t, d.Degraded())
				if d.Allowed() {
					n++
				}
			}
			assert.Equal(t, tt.want, n)

			s.set(nil, 4)
			clk.Advance(100 * time.Millisecond)
			require.NoError(t, l.SyncOnce(ctx))
			assert.Equal(t, lease+int64(tt.want), s.last().Consumed, "the outage's consumption is reported after the heal")
			d, err = l.Allow("k")
			require.NoError(t, err)
			assert.False(t, d.Degraded())
		})
	}
}

// TestCloseFlushes checks that Close reports the last consumption and
// hands the lease back (demand 0).
func TestCloseFlushes(t *testing.T) {
	t.Parallel()
	s := newScripted(1_000_000, "k")
	l, clk := stepped(t, s, fleet.DemandWeighted)
	admit(t, l, "k", 100)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(context.Background()))
	require.Equal(t, 7, admit(t, l, "k", 7))
	require.NoError(t, l.Close())
	assert.Equal(t, int64(7), s.last().Consumed)
	assert.Equal(t, int64(0), s.last().Demand)
	require.NoError(t, l.Close(), "Close twice is harmless")
}

func TestPolicyResolution(t *testing.T) {
	t.Parallel()
	s := newScripted(1_000_000)
	clk := clock.NewManual(epoch)
	resolved := map[string]int{}
	var mu sync.Mutex
	l, err := hybrid.New(hybrid.Config{
		Policies: []hybrid.Policy{
			{Name: "default", Mode: hybrid.Local, Limit: 1, Window: time.Hour},
			{Name: "user", Prefix: "user:", Mode: hybrid.Local, Limit: 2, Window: time.Hour},
			{Name: "vip", Prefix: "user:vip:", Mode: hybrid.Local, Limit: 3, Window: time.Hour},
			{Name: "named", Mode: hybrid.Local, Prefix: "\x00never", Limit: 4, Window: time.Hour},
		},
		Resolve: func(key string) string {
			mu.Lock()
			defer mu.Unlock()
			resolved[key]++
			if strings.HasSuffix(key, "!") {
				return "named"
			}
			return ""
		},
		Syncer: s, ManualSync: true, Clock: clk,
	})
	require.NoError(t, err)
	defer l.Close()
	for key, want := range map[string]int{"x": 1, "user:1": 2, "user:vip:1": 3, "user:!": 4} {
		assert.Equal(t, want, admit(t, l, key, 10), key)
		d, err := l.Allow(key)
		require.NoError(t, err)
		assert.Equal(t, int64(want), d.Limit(), key)
		assert.Equal(t, 1, resolved[key], "resolved once per key, not per call: %s", key)
	}
}

func TestNoPolicyAndBadKeys(t *testing.T) {
	t.Parallel()
	l, err := hybrid.New(hybrid.Config{
		Policies:  []hybrid.Policy{{Name: "user", Prefix: "user:", Mode: hybrid.Local, Limit: 1, Window: time.Second}},
		MaxKeyLen: 8, MaxKeys: 2, ManualSync: true,
	})
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Allow("other")
	assert.ErrorIs(t, err, hybrid.ErrNoPolicy)
	_, err = l.Allow("user:123456789")
	assert.ErrorIs(t, err, hybrid.ErrKeyTooLong)
	d, err := l.AllowN("user:1", 0)
	require.NoError(t, err)
	assert.True(t, d.Allowed(), "n = 0 takes nothing")
}

// TestMaxKeys checks that a full Limiter refuses a new key while every key
// is in use, and makes room by forgetting one unused for a sweep period.
// A Config.Resolve puts Local keys in the Limiter's own key table, which
// sweeps so.
func TestMaxKeys(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Policies: []hybrid.Policy{{Name: "p", Mode: hybrid.Local, Limit: 10, Window: time.Second}},
		Resolve:  func(string) string { return "p" },
		MaxKeys:  2, ManualSync: true, Clock: clk,
	})
	require.NoError(t, err)
	defer l.Close()
	allow := func(key string) error { _, err := l.Allow(key); return err }
	require.NoError(t, allow("a"))
	require.NoError(t, allow("b"))
	assert.ErrorIs(t, allow("c"), hybrid.ErrTooManyKeys, "full, and room is sought at most once per interval")
	clk.Advance(100 * time.Millisecond)
	assert.ErrorIs(t, allow("c"), hybrid.ErrTooManyKeys, "a and b were used since the last sweep")
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, allow("a"))
	require.NoError(t, allow("c"), "b went unused for a sweep period and was forgotten")
	assert.Equal(t, 2, l.Len())
	require.NoError(t, allow("a"), "a was kept")
}

// TestLocalMaxKeys: without a Config.Resolve, a Local policy's keys are
// held by its local.Limiter alone, with its rule: a new key is refused
// while MaxKeys keys are held and none is idle (its bucket full again),
// with an error that is ErrTooManyKeys.
func TestLocalMaxKeys(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Policies: []hybrid.Policy{{Name: "p", Mode: hybrid.Local, Limit: 10, Window: time.Second}},
		MaxKeys:  2, ManualSync: true, Clock: clk,
	})
	require.NoError(t, err)
	defer l.Close()
	allow := func(key string) error { _, err := l.Allow(key); return err }
	require.NoError(t, allow("a"))
	require.NoError(t, allow("b"))
	assert.ErrorIs(t, allow("c"), hybrid.ErrTooManyKeys, "full, and no key is idle")
	assert.Equal(t, 2, l.Len())
	clk.Advance(time.Second)
	require.NoError(t, allow("c"), "a and b are idle")
	assert.LessOrEqual(t, l.Len(), 2)
}

func TestNeverAdmissible(t *testing.T) {
	t.Parallel()
	l, _ := stepped(t, newScripted(1_000_000, "k"), fleet.DemandWeighted)
	d, err := l.AllowN("k", 1001)
	require.NoError(t, err)
	assert.Equal(t, local.Never, d.RetryAfter())
	assert.Error(t, l.WaitN(context.Background(), "k", 1001))
}
