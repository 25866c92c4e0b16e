package metrics_test

import (
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
)

// Serve a Limiter's hot keys and health on /metrics, labelled with the
// limiter's name so that several in one process stay apart.
func ExampleNewCollector() {
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{{Name: "api", Mode: hybrid.Local, Limit: 100, Window: time.Second}}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	prometheus.WrapRegistererWith(prometheus.Labels{"limiter": "api"}, reg).MustRegister(metrics.NewCollector(l))
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
}
