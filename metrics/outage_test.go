package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/metrics"
)

// TestCollectorOutage scrapes a live Limiter through a scripted outage of
// its real Redis: healthy, then the Redis killed and the node's sync
// rounds failing, its breaker opening, its health degrading and its
// ladder stepping down (its whole share for 5 s, then half), then the
// Redis back and everything as it was. The clock is the test's, the
// Redis and its failures real.
func TestCollectorOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	store, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t)})
	require.NoError(t, err)
	clk := clock.NewManual(time.Now())
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: store, Clock: clk, ManualSync: true, Interval: 100 * time.Millisecond,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1000, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(l))

	// scrape reads the metrics: a name (with its labels' values, as
	// name{v1,v2}) to its value.
	scrape := func() map[string]float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				name := f.GetName()
				if len(m.GetLabel()) > 0 {
					name += "{"
					for i, lp := range m.GetLabel() {
						if i > 0 {
							name += ","
						}
						name += lp.GetValue()
					}
					name += "}"
				}
				switch f.GetType() {
				case dto.MetricType_COUNTER:
					out[name] = m.GetCounter().GetValue()
				case dto.MetricType_GAUGE:
					out[name] = m.GetGauge().GetValue()
				}
			}
		}
		return out
	}
	steps := func(n int) {
		for range n {
			_, _ = l.Allow("k")
			clk.Advance(100 * time.Millisecond)
			_ = l.SyncOnce(context.Background()) // fails while Redis is down
		}
	}

	steps(10)
	m := scrape()
	assert.Equal(t, 0.0, m["hybridlimit_health"], "healthy")
	assert.Equal(t, 1.0, m["hybridlimit_breaker_state{Syncer,closed}"])
	assert.Zero(t, m["hybridlimit_sync_round_errors_total"])

	srv.Kill()
	steps(20) // 2 s without Redis
	m = scrape()
	t.Logf("2 s into the outage: health %v, breaker open %v, round errors %v, fleet errors %v, ladder %v",
		m["hybridlimit_health"], m["hybridlimit_breaker_state{Syncer,open}"], m["hybridlimit_sync_round_errors_total"],
		m["hybridlimit_fleet_errors_total{timeout,Syncer}"], m["hybridlimit_ladder_factor"])
	assert.GreaterOrEqual(t, m["hybridlimit_health"], 1.0, "degraded")
	assert.Equal(t, 1.0, m["hybridlimit_breaker_state{Syncer,open}"]+m["hybridlimit_breaker_state{Syncer,half-open}"], "the breaker has opened")
	assert.GreaterOrEqual(t, m["hybridlimit_sync_round_errors_total"], 5.0)
	t.Logf("fleet errors by cause: timeout %v, connect %v, other %v", m["hybridlimit_fleet_errors_total{timeout,Syncer}"],
		m["hybridlimit_fleet_errors_total{connect,Syncer}"], m["hybridlimit_fleet_errors_total{other,Syncer}"])
	// go-redis's pool retries a refused dial until the call's context
	// ends: a dead Redis is seen as timeouts, not as refused connections.
	assert.Equal(t, m["hybridlimit_sync_round_errors_total"], m["hybridlimit_fleet_errors_total{timeout,Syncer}"]+
		m["hybridlimit_fleet_errors_total{connect,Syncer}"]+m["hybridlimit_fleet_errors_total{other,Syncer}"], "every error has a cause")
	assert.Positive(t, m["hybridlimit_fleet_errors_total{timeout,Syncer}"])
	assert.Equal(t, 1.0, m["hybridlimit_ladder_factor"], "its whole share for the first 5 s")

	steps(40) // 6 s
	m = scrape()
	assert.Equal(t, 0.5, m["hybridlimit_ladder_factor"], "half its share from 5 s")
	errorsDown := m["hybridlimit_sync_round_errors_total"]

	srv.Restart(t)
	rounds := 0
	require.Eventually(t, func() bool { // healthy at once, the breaker closed after enough probes
		steps(1)
		rounds++
		m := scrape()
		return m["hybridlimit_health"] == 0 && m["hybridlimit_breaker_state{Syncer,closed}"] == 1
	}, 30*time.Second, time.Millisecond, "healthy again, the breaker closed")
	t.Logf("back: healthy with the breaker closed after %d rounds", rounds)
	m = scrape()
	assert.Equal(t, 1.0, m["hybridlimit_ladder_factor"])
	assert.GreaterOrEqual(t, m["hybridlimit_sync_round_errors_total"], errorsDown, "counters do not go back")
}
