package metrics_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/assert"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/metrics"
)

// generous is a fleet in memory that grants every node what it asks.
type generous struct{}

func (generous) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i, u := range req.Keys {
		resp.Grants[i] = fleet.Grant{Lease: u.Demand, TTL: 2 * req.Interval, Remaining: 1 << 30, Nodes: 1, Weight: 1}
	}
	return resp, nil
}

// TestCollector drives a key hot on a Limiter and scrapes it: the key's
// stripes and rate are reported while it is split, and gone once it has
// merged back.
func TestCollector(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1e9, 0))
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: generous{}, Clock: clk, ManualSync: true,
		HotKeyRate: 1000, HotKeyStripes: 4,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(l, metrics.RawKeys()))

	step := func(n int) {
		for range n {
			_, _ = l.Allow("tenant-big")
		}
		_, _ = l.Allow("quiet")
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(context.Background()))
	}
	for range 5 {
		step(500) // 5,000/s
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP hybridlimit_failing_keys Keys the fleet answered with an error; they follow their policy's FailMode.
# TYPE hybridlimit_failing_keys gauge
hybridlimit_failing_keys 0
# HELP hybridlimit_health Link to the fleet: 0 healthy, 1 degraded, 2 emergency.
# TYPE hybridlimit_health gauge
hybridlimit_health 0
# HELP hybridlimit_hot_key_stripes Stripes a hot Hybrid key's lease is split over on this node.
# TYPE hybridlimit_hot_key_stripes gauge
hybridlimit_hot_key_stripes{key="tenant-big"} 4
# HELP hybridlimit_keys Keys the limiter tracks.
# TYPE hybridlimit_keys gauge
hybridlimit_keys 2
# HELP hybridlimit_ladder_factor Part of its share the node may spend: 1 while healthy, less while cut off.
# TYPE hybridlimit_ladder_factor gauge
hybridlimit_ladder_factor 1
# HELP hybridlimit_sync_late_seconds How late the sync loop runs: its last regular sync's start, or the next's if overdue.
# TYPE hybridlimit_sync_late_seconds gauge
hybridlimit_sync_late_seconds 0
`), "hybridlimit_failing_keys", "hybridlimit_health", "hybridlimit_hot_key_stripes", "hybridlimit_keys", "hybridlimit_ladder_factor", "hybridlimit_sync_late_seconds"))
	require.InDelta(t, 5000, value(t, reg, "hybridlimit_hot_key_rate"), 1000, "the rate offered, estimated")

	for range 20 {
		step(0)
	}
	n, err := testutil.GatherAndCount(reg, "hybridlimit_hot_key_stripes", "hybridlimit_hot_key_rate")
	require.NoError(t, err)
	require.Zero(t, n, "merged back: no longer reported")
}

// value gathers reg and returns the one sample of name.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.Metric, 1)
			return mf.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s gathered", name)
	return 0
}

// splitStore is a Strict store whose every key is split into 4 shards by
// some other node: a decision on the key itself is told to use them.
type splitStore struct{ generous }

func (splitStore) Allow(_ context.Context, key string, _ fleet.Limit, _ int64) (store.Decision, error) {
	if !strings.Contains(key, "#") {
		return store.Decision{Shards: 4, ShardedFor: time.Minute}, nil
	}
	return store.Decision{Allowed: true, Remaining: 10}, nil
}

func (splitStore) MarkShards(context.Context, string, int, time.Duration) (int, error) {
	return 4, nil
}

func (splitStore) ChargeAtLeast(context.Context, string, fleet.Limit, int64) error { return nil }

// TestCollectorShards checks that a Strict key this node follows onto its
// Redis shards is reported with their count.
func TestCollectorShards(t *testing.T) {
	t.Parallel()
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: splitStore{}, ManualSync: true, HotKeyRate: -1,
		Policies: []hybrid.Policy{{Name: "login", Mode: hybrid.Strict, Limit: 1000, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(l, metrics.RawKeys()))
	d, err := l.Allow("tenant-big")
	require.NoError(t, err)
	require.True(t, d.Allowed(), "decided on a shard")
	require.NoError(t, l.SyncOnce(context.Background()))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP hybridlimit_hot_key_shards Redis keys a hot key is split into: a Strict key's decisions, or a Hybrid key's leases.
# TYPE hybridlimit_hot_key_shards gauge
hybridlimit_hot_key_shards{key="tenant-big"} 4
`), "hybridlimit_hot_key_shards"))
}

// refusing is a fleet that answers every key with an error of its own.
type refusing struct{}

func (refusing) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i := range req.Keys {
		resp.Grants[i].Err = fmt.Errorf("%w: WRONGTYPE", fleet.ErrInvalid)
	}
	return resp, nil
}

// TestCollectorFailingKeys checks that a key the fleet answers with an
// error shows in hybridlimit_failing_keys.
func TestCollectorFailingKeys(t *testing.T) {
	t.Parallel()
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: refusing{}, ManualSync: true,
		Policies: []hybrid.Policy{{Name: "api", Limit: 100, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(l))
	for _, key := range []string{"a", "b"} {
		_, err := l.Allow(key)
		require.NoError(t, err)
	}
	require.NoError(t, l.SyncOnce(context.Background()))
	require.Equal(t, 2.0, value(t, reg, "hybridlimit_failing_keys"))
}

// TestCollectorCounts checks the request, round and fleet metrics after
// traffic and syncs, and lints every metric the Collector exports with
// promlint (names, units, help, counter suffixes).
func TestCollectorCounts(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1e9, 0))
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: generous{}, Clock: clk, ManualSync: true,
		Policies: []hybrid.Policy{
			{Name: "api", Limit: 1_000_000, Window: time.Second},
			{Name: "local", Prefix: "local:", Mode: hybrid.Local, Limit: 10, Window: time.Second},
		}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(l))
	for range 3 {
		for range 7 {
			_, _ = l.Allow("tenant")
			_, _ = l.Allow("local:x")
		}
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(context.Background()))
	}
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP hybridlimit_breaker_state 1 for the state a fleet's circuit breaker is in, 0 for the others.
# TYPE hybridlimit_breaker_state gauge
hybridlimit_breaker_state{fleet="Syncer",state="closed"} 1
hybridlimit_breaker_state{fleet="Syncer",state="half-open"} 0
hybridlimit_breaker_state{fleet="Syncer",state="open"} 0
# HELP hybridlimit_leases_total Leases the fleet granted this node's Hybrid keys.
# TYPE hybridlimit_leases_total counter
hybridlimit_leases_total 3
# HELP hybridlimit_keys_forgotten_total Keys forgotten: idle, evicted at MaxKeys, or moved by a change of policy.
# TYPE hybridlimit_keys_forgotten_total counter
hybridlimit_keys_forgotten_total 0
# HELP hybridlimit_requests_total Requests decided, by policy and outcome; a request of cost n counts n.
# TYPE hybridlimit_requests_total counter
hybridlimit_requests_total{mode="hybrid",outcome="admitted",policy="api"} 21
hybridlimit_requests_total{mode="hybrid",outcome="refused",policy="api"} 0
# HELP hybridlimit_sync_round_keys Hybrid keys the last sync round had to sync.
# TYPE hybridlimit_sync_round_keys gauge
hybridlimit_sync_round_keys 1
# HELP hybridlimit_sync_rounds_total Sync rounds run.
# TYPE hybridlimit_sync_rounds_total counter
hybridlimit_sync_rounds_total 3
`), "hybridlimit_breaker_state", "hybridlimit_requests_total", "hybridlimit_sync_round_keys", "hybridlimit_sync_rounds_total",
		"hybridlimit_leases_total", "hybridlimit_keys_forgotten_total"))
	n, err := testutil.GatherAndCount(reg, "hybridlimit_sync_round_duration_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems, "promlint")
}

// TestCollectorHashesKeys checks that by default no key reaches
// /metrics as it is, in the hot-key and most-refused metrics alike,
// while RawKeys shows them: a hot tenant's API key was once exported as
// key="api:sk_live_...".
func TestCollectorHashesKeys(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1e9, 0))
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: stingy{}, Clock: clk, ManualSync: true,
		HotKeyRate: 1000, HotKeyStripes: 4,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const secret = "api:sk_live_4eC39HqLyjWDarjtT1zdp7dc"
	for range 5 {
		for range 500 {
			_, _ = l.Allow(secret)
		}
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(context.Background()))
	}
	require.NotEmpty(t, l.Stats().TopRefused, "the stingy fleet refused the key")
	hashed, err := testutil.CollectAndFormat(metrics.NewCollector(l), expfmt.TypeTextPlain,
		"hybridlimit_top_refused_requests", "hybridlimit_hot_key_rate")
	require.NoError(t, err)
	require.NotContains(t, string(hashed), "sk_live", "a key in /metrics")
	require.Contains(t, string(hashed), `hybridlimit_top_refused_requests{key="h:`)
	raw, err := testutil.CollectAndFormat(metrics.NewCollector(l, metrics.RawKeys()), expfmt.TypeTextPlain,
		"hybridlimit_top_refused_requests")
	require.NoError(t, err)
	require.Contains(t, string(raw), `key="`+secret+`"`)
}

// stingy is a fleet in memory that grants each sync a tenth of what it
// asks.
type stingy struct{}

func (stingy) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i, u := range req.Keys {
		resp.Grants[i] = fleet.Grant{Lease: u.Demand / 10, TTL: 2 * req.Interval, Remaining: 0, Nodes: 1, Weight: 1}
	}
	return resp, nil
}

// TestCollectorSeriesBounded: a flood of unique keys, each refused,
// leaves /metrics with as many series as a handful of keys does: no
// metric is labelled per key but the 10 refused most and the hot keys.
func TestCollectorSeriesBounded(t *testing.T) {
	t.Parallel()
	series := func(keys int) int {
		clk := clock.NewManual(time.Unix(1e9, 0))
		l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: generous{}, Clock: clk, ManualSync: true, MaxKeys: 2 * keys,
			Policies: []hybrid.Policy{{Name: "api", Limit: 1, Window: time.Hour}}})
		require.NoError(t, err)
		defer l.Close()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(metrics.NewCollector(l))
		refused := 0
		for round := range 2 {
			for i := range keys {
				for range 3 {
					if d, err := l.Allow("flood:" + strconv.Itoa(i)); err == nil && !d.Allowed() && round == 1 {
						refused++
					}
				}
			}
			clk.Advance(100 * time.Millisecond)
			require.NoError(t, l.SyncOnce(context.Background()))
		}
		require.Positive(t, refused)
		families, err := reg.Gather()
		require.NoError(t, err)
		n := 0
		for _, f := range families {
			n += len(f.GetMetric())
		}
		return n
	}
	few, many := series(10), series(50_000)
	t.Logf("series after 10 keys: %d; after 50,000: %d", few, many)
	assert.Equal(t, few, many)
}
