package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// BenchmarkRLS is the Envoy rate limit service of one hybridlimitd on a
// real Redis, called by a real gRPC client from 64 goroutines over one
// connection, one descriptor of 10 or 1,000 tenants (each far under its
// limit) a call: decisions a second, the 99th percentile of a call's
// time (p99-ms), Redis commands a decision (redis-cmds/op), and the
// decisions refused (refused-%), each one the fleet had room for.
func BenchmarkRLS(b *testing.B) {
	for _, tenants := range []int{10, 1000} {
		b.Run(fmt.Sprint("tenants=", tenants), func(b *testing.B) { benchRLS(b, tenants) })
	}
}

func benchRLS(b *testing.B, tenants int) {
	dir := b.TempDir()
	conf := "domain: bench\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"
	require.NoError(b, os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte(conf), 0o600))
	srv := redistest.StartServer(b)
	c, _ := startRLS(b, &options{envoy: []string{dir}, redis: srv.Addr, node: "bench"})
	reqs := make([]*rlspb.RateLimitRequest, tenants)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*commonpb.RateLimitDescriptor{desc(fmt.Sprint("tenant=t", i))}}
		_, err := c.ShouldRateLimit(context.Background(), reqs[i])
		require.NoError(b, err)
	}
	srv.ResetStats(b)
	var mu sync.Mutex
	var took []time.Duration
	var over atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 cores
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		i := 0
		for pb.Next() {
			t := time.Now()
			resp, err := c.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
			if err != nil {
				b.Errorf("call: %v", err)
				break
			}
			if resp.OverallCode != rlspb.RateLimitResponse_OK {
				over.Add(1) // far under the limit: a refusal the fleet had room for
			}
			mine = append(mine, time.Since(t))
			i += 7
		}
		mu.Lock()
		took = append(took, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	var cmds int64
	for _, n := range srv.Commands(b) {
		cmds += n
	}
	if len(took) == 0 {
		b.Fatal("no call succeeded")
	}
	slices.Sort(took)
	b.ReportMetric(float64(len(took))/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cmds)/float64(len(took)), "redis-cmds/op")
	b.ReportMetric(100*float64(over.Load())/float64(len(took)), "refused-%")
}
