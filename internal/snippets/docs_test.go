package snippets

import (
	"context"
	"crypto/subtle"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.opentelemetry.io/otel"

	"github.com/hybridlimit/hybridlimit/admin"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/loadfactor"
	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/metrics/gossipmetrics"
	"github.com/hybridlimit/hybridlimit/partition"
	"github.com/hybridlimit/hybridlimit/rules"
	"github.com/hybridlimit/hybridlimit/tracing"
)

// The snippets of docs/, each in a function that declares what it takes
// from around it. They are compiled, not run.

// docs/gossip.md
func docsGossip(key []byte, policies []hybrid.Policy) error {
	g, err := gossip.New(gossip.Config{
		Name:      "api-7",                   // unique in the fleet; default host name + random suffix
		BindPort:  7946,                      // 0 picks a free port; g.Addr() reports it
		Seeds:     []string{"10.0.0.5:7946"}, // any members, or a DNS name for many; re-resolved every RejoinInterval
		SecretKey: key,                       // 16, 24 or 32 bytes: AES-GCM on every packet and stream
		Label:     "prod-api",                // a node with another label is refused
	})
	if err != nil {
		log.Fatal(err) // a bad key, or the port is in use
	}
	limiter, err := hybrid.New(hybrid.Config{Node: g.Name(), Syncer: g, Policies: policies})
	defer g.Close()       // second: says goodbye, so the others take this node's share at once
	defer limiter.Close() // first: reports the last consumption
	return err
}

// docs/partitions.md
func docsPartitions() hybrid.Config {
	return hybrid.Config{
		Ladder: partition.LadderConfig{
			Steps: []partition.Step{
				{Until: 10 * time.Second, Factor: 1}, // ride out short blips at full share
				{Until: 2 * time.Minute, Factor: 0.5},
				{Factor: 0.2}, // the last step's Until is 0: for ever
			},
			Floor: 0.1, // no step below a tenth of the share
		},
	}
}

// docs/partitions.md, "Hearing of a change"
func docsQuietRedis() {
	redis.SetLogger(&logging.VoidLogger{}) // github.com/redis/go-redis/v9/logging
}

// docs/observability.md
func docsObservability(l *hybrid.Limiter) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(l)) // one per Limiter; label several with prometheus.WrapRegistererWith
	return reg
}

// docs/observability.md, "Gossip"
func docsGossipMetrics(l *hybrid.Limiter, g *gossip.Gossip) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(l), gossipmetrics.NewCollector(g))
	return reg
}

// docs/observability.md, "Tracing"
func docsTracing(redisFleet *global.Redis, policies []hybrid.Policy) (*hybrid.Limiter, error) {
	l, err := hybrid.New(hybrid.Config{Syncer: redisFleet, Policies: policies, Tracer: tracing.New(otel.GetTracerProvider())})
	return l, err
}

// docs/policies.md, "Deciding with the rules"
func docsRules(ctx context.Context, redisFleet *global.Redis, r *http.Request, apiKey, plan, clientIP string) {
	set, err := rules.Load("/etc/hybridlimit/rules.yaml")
	if err != nil {
		log.Fatal(err) // the file, line and field at fault
	}
	limiter, err := hybrid.New(hybrid.Config{Syncer: redisFleet, Policies: set.Policies()})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	rl, err := rules.New(limiter, set)
	if err != nil {
		log.Fatal(err)
	}
	go rl.Watch(ctx, "/etc/hybridlimit/rules.yaml", time.Second, slog.Default()) // until ctx ends

	v, err := rl.Allow(rules.Request{Tenant: apiKey, Tier: plan, Endpoint: r.Method + " " + r.URL.Path, IP: clientIP})
	if err == nil && !v.Allowed() {
		log.Printf("refused by %s; retry in %v", v.Policy, v.RetryAfter()) // v.Policy: "api/free", "per-ip", ...
	}
}

// docs/policies.md, "The admin API and the rate check"
func docsAdmin(rl *rules.Limiter, token, path string, mux *http.ServeMux) {
	api, err := admin.New(admin.Config{
		Rules: rl,
		Authorize: func(r *http.Request) error { // required: with none, New fails
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) != 1 {
				return errors.New("a bearer token is required")
			}
			return nil
		},
		OnChange: func(doc []byte) { _ = os.WriteFile(path, doc, 0o600) }, // keep the file in step
	})
	if err != nil {
		log.Fatal(err)
	}
	mux.Handle("/admin/", api)
	mux.Handle("/v1/check", admin.Check(rl))
}

// docs/policies.md, "The load factor"
func docsLoadFactor(ctx context.Context, limiter *hybrid.Limiter, p99 func() time.Duration) {
	go loadfactor.Run(ctx, loadfactor.Config{ // until ctx ends
		Limiter: limiter,
		Signal:  func() float64 { return min(1, 0.2/p99().Seconds()) }, // a 200 ms latency target
	})
}

// docs/policies.md, "Limits given per call"
func docsCallLimit(limiter *hybrid.Limiter, tenant string, customers map[string]struct{ RequestsPerMinute int64 }) (hybrid.Decision, error) {
	limit := customers[tenant].RequestsPerMinute // your store, your cache
	d, err := limiter.AllowNLimit("api:"+tenant, 1, limit, 0)
	return d, err
}

var _ = []any{docsGossip, docsPartitions, docsQuietRedis, docsObservability, docsGossipMetrics, docsTracing, docsRules, docsAdmin, docsLoadFactor, docsCallLimit}
