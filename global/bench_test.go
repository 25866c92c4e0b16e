package global_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// BenchmarkSync is one node's sync of N active keys against real Redis on
// loopback. rtt/sync counts the pipelines sent: it must stay 1 however
// many keys there are.
func BenchmarkSync(b *testing.B) {
	s := redistest.StartServer(b)
	c := s.DeadlineClient(b)
	counter := &pipelineCounter{byNode: map[string]int{}}
	c.AddHook(counter.hook(s.Addr))
	r := newSyncer(b, c)
	lim := global.Limit{Limit: 1_000_000, Window: time.Second}
	for _, n := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			req := &global.Request{Node: "bench", Interval: 100 * time.Millisecond}
			for i := range n {
				req.Keys = append(req.Keys, global.Usage{Key: fmt.Sprint("k", i), Limit: lim, Consumed: 3, Demand: 3})
			}
			counter.reset()
			for b.Loop() {
				if _, err := r.Sync(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			trips := 0
			for _, v := range counter.reset() {
				trips += v
			}
			b.ReportMetric(float64(trips)/float64(b.N), "rtt/sync")
			b.ReportMetric(float64(n), "keys/sync")
		})
	}
}

// BenchmarkStrictAllow is one per-request decision in Redis (strict mode,
// what go-redis/redis_rate does): the baseline the hybrid mode beats.
func BenchmarkStrictAllow(b *testing.B) {
	s := redistest.StartServer(b)
	c := s.DeadlineClient(b)
	r := newSyncer(b, c)
	lim := global.Limit{Limit: 1_000_000_000, Window: time.Second}
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		start := time.Now()
		if _, err := r.Allow(context.Background(), "strict", lim, 1); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
