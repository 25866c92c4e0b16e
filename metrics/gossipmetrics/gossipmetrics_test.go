package gossipmetrics_test

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/metrics/gossipmetrics"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"), // memberlist's probe may outlive Shutdown by a timeout
	)
}

// TestCollector: three real gossip nodes, each a Limiter's fleet, share a
// key; one node's metrics count the members, the key and its peers, the
// messages and bytes both ways and the merges, and pass promlint.
func TestCollector(t *testing.T) {
	peers := gossiptest.Start(t, 3, nil)
	fleet := fleettest.Limiters(t, 3, func(i int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{{Name: "api", Limit: 1000, Window: time.Second}}, Syncer: peers.Nodes[i], Interval: 50 * time.Millisecond}
	})
	fleettest.Drive(t, fleet, "k", []float64{50, 50, 50}, time.Second)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(gossipmetrics.NewCollector(peers.Nodes[0]))
	got := map[string]float64{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		m := f.GetMetric()[0]
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			got[f.GetName()] = m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			got[f.GetName()] = m.GetGauge().GetValue()
		}
	}
	t.Logf("%v", got)
	assert.Len(t, got, 18, "every metric")
	assert.Equal(t, 3.0, got["hybridlimit_gossip_members"])
	assert.GreaterOrEqual(t, got["hybridlimit_gossip_keys"], 1.0)
	assert.Equal(t, 2.0, got["hybridlimit_gossip_peers"], "the two others' counts of the key")
	for _, name := range []string{"messages_received_total", "updates_queued_total", "received_bytes_total", "sent_bytes_total", "merges_total", "merge_seconds_total"} {
		assert.Positive(t, got["hybridlimit_gossip_"+name], name)
	}
	assert.Zero(t, got["hybridlimit_gossip_messages_malformed_total"])
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems, "promlint")
}

// TestDashboard: every metric docs/examples/grafana/hybridlimit.json
// queries is one the collectors export, so that a renamed metric cannot
// leave the dashboard's panels empty.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../../docs/examples/grafana/hybridlimit.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.Panels)

	peers := gossiptest.Start(t, 1, nil)
	l := fleettest.Limiters(t, 1, func(int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{{Name: "api", Limit: 10, Window: time.Second}}, Syncer: peers.Nodes[0]}
	})[0]
	for range 20 {
		_, _ = l.Allow("k") // a refusal or two: the top refused keys' series
	}
	require.Eventually(t, func() bool { return len(l.Stats().TopRefused) > 0 }, 5*time.Second, 20*time.Millisecond)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector(l), gossipmetrics.NewCollector(peers.Nodes[0]))
	families, err := reg.Gather()
	require.NoError(t, err)
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			exported[f.GetName()+"_bucket"] = true
		}
	}
	name := regexp.MustCompile(`hybridlimit_[a-z_]+`)
	queried := 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, q := range p.Targets {
			for _, m := range name.FindAllString(q.Expr, -1) {
				queried++
				assert.True(t, exported[m], "panel %q queries %s, which no collector exports", p.Title, m)
			}
		}
	}
	t.Logf("%d panels, %d metric references, all exported", len(dash.Panels), queried)
}
