package metrics_test

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
)

// BenchmarkAllowScraped times Hybrid decisions on a Limiter syncing in
// the background, bare and while a Collector is scraped every 10 ms (a
// Prometheus server scrapes every 15 s or so: this is 1,500 times as
// often). Compare the two in the same run: the Collector reads what the
// hot path counts anyway, and adds nothing to a decision.
//
//	go test -run '^$' -bench BenchmarkAllowScraped -count 5 ./metrics
func BenchmarkAllowScraped(b *testing.B) {
	for _, scraped := range []bool{false, true} {
		name := "bare"
		if scraped {
			name = "scraped"
		}
		b.Run(name, func(b *testing.B) {
			l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: generous{},
				Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000_000, Window: time.Second}}})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if scraped {
				reg := prometheus.NewRegistry()
				reg.MustRegister(metrics.NewCollector(l))
				wg.Go(func() {
					t := time.NewTicker(10 * time.Millisecond)
					defer t.Stop()
					for {
						select {
						case <-stop:
							return
						case <-t.C:
							if _, err := reg.Gather(); err != nil {
								b.Error(err)
							}
						}
					}
				})
			}
			for range 1000 {
				_, _ = l.Allow("k")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, _ = l.Allow("k")
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
		})
	}
}
