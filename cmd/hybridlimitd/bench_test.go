package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

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
	drive(b, c, srv, tenants)
}

// drive calls c from 64 goroutines, a descriptor of one of tenants a
// call, and reports decisions a second, the 99th percentile of a call's
// time, srv's Redis commands a decision, and the decisions refused.
func drive(b *testing.B, c rlspb.RateLimitServiceClient, srv *redistest.Server, tenants int) {
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

// perRequest is envoyproxy/ratelimit's approach to the same service, for
// BenchmarkRLS to compare with: every descriptor of every call is a fixed
// window counter in Redis, one pipeline (INCRBY, EXPIRE) a call. It is a
// model of that approach, not envoyproxy/ratelimit itself (whose module
// stays out of this one's dependencies): the same Redis round trip per
// call, without its stats or config reloading.
type perRequest struct {
	rlspb.UnimplementedRateLimitServiceServer
	rdb   *redis.Client
	limit int64
}

func (p *perRequest) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	window := time.Now().Unix()
	pipe := p.rdb.Pipeline()
	incrs := make([]*redis.IntCmd, len(req.Descriptors))
	for i, d := range req.Descriptors {
		key := fmt.Sprintf("%s_%s_%s_%d", req.Domain, d.Entries[0].Key, d.Entries[0].Value, window)
		incrs[i] = pipe.IncrBy(ctx, key, 1)
		pipe.Expire(ctx, key, time.Second)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for _, c := range incrs {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		if c.Val() > p.limit {
			st.Code, resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

// BenchmarkRLSPerRequest is BenchmarkRLS's load against perRequest, on
// the same machine in the same run: the baseline.
func BenchmarkRLSPerRequest(b *testing.B) {
	for _, tenants := range []int{10, 1000} {
		b.Run(fmt.Sprint("tenants=", tenants), func(b *testing.B) {
			srv := redistest.StartServer(b)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
			b.Cleanup(func() { rdb.Close() })
			g := grpc.NewServer()
			rlspb.RegisterRateLimitServiceServer(g, &perRequest{rdb: rdb, limit: 1_000_000})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(b, err)
			go func() { _ = g.Serve(ln) }()
			b.Cleanup(g.Stop)
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(b, err)
			b.Cleanup(func() { conn.Close() })
			drive(b, rlspb.NewRateLimitServiceClient(conn), srv, tenants)
		})
	}
}
