package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// BenchmarkRLSOpenLoop offers one hybridlimitd on a real Redis a fixed
// rate of calls (10 tenants, far under their limits) for 3 s, whatever
// its answers' pace, as Envoy's traffic would, and reports the rate it
// served and each call's time from when it was queued for the 512
// callers (so that a call held up behind others counts its wait). One
// iteration is the whole run; ns/op means nothing.
//
//	go test -run '^$' -bench BenchmarkRLSOpenLoop -benchtime 1x ./cmd/hybridlimitd/
func BenchmarkRLSOpenLoop(b *testing.B) {
	for _, rate := range []int{10_000, 25_000, 40_000, 50_000} {
		b.Run(fmt.Sprint("offered=", rate), func(b *testing.B) {
			dir := b.TempDir()
			conf := "domain: bench\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"
			require.NoError(b, os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(conf), 0o600))
			srv := redistest.StartServer(b)
			c, _ := startRLS(b, &options{envoy: []string{dir}, redis: srv.Addr, node: "bench"})
			for range b.N {
				openLoop(b, c, rate, 3*time.Second)
			}
		})
	}
}

func openLoop(b *testing.B, c rlspb.RateLimitServiceClient, rate int, d time.Duration) {
	reqs := make([]*rlspb.RateLimitRequest, 10)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*commonpb.RateLimitDescriptor{desc(fmt.Sprint("tenant=t", i))}}
		_, err := c.ShouldRateLimit(context.Background(), reqs[i])
		require.NoError(b, err)
	}
	const workers = 512
	due := make(chan time.Time, 4*workers)
	var mu sync.Mutex
	var took []time.Duration
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var mine []time.Duration
			i := w
			for at := range due {
				if _, err := c.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
					b.Errorf("call: %v", err)
					break
				}
				mine = append(mine, time.Since(at))
				i++
			}
			mu.Lock()
			took = append(took, mine...)
			mu.Unlock()
		})
	}
	start := time.Now()
	interval := time.Second / time.Duration(rate)
	sent := 0
	for now := time.Now(); now.Sub(start) < d; now = time.Now() {
		for want := int(now.Sub(start) / interval); sent < want; sent++ {
			// Stamped when queued: the wait behind busy workers counts,
			// the pacer's own lag (its sleeps overshoot) does not. The
			// pacer blocks only with 2,048 calls waiting.
			due <- time.Now()
		}
		time.Sleep(200 * time.Microsecond)
	}
	close(due)
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(took)
	b.ReportMetric(float64(len(took))/elapsed.Seconds(), "served/s")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}
