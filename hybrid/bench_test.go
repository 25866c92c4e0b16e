package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// Run the hot-path benchmarks beside their baseline:
//
//	go test -run '^$' -bench 'HybridAllow|LocalGCRA|HybridVsStrict' -benchmem ./hybrid/

// benchLimiter is a Limiter whose sync loop runs against real Redis, with
// a limit far above what one machine can offer, so every call is admitted
// from the lease.
func benchLimiter(b *testing.B, srv *redistest.Server, mode hybrid.Mode) *hybrid.Limiter {
	b.Helper()
	l, err := hybrid.New(hybrid.Config{
		Node:     "bench",
		Policies: []hybrid.Policy{{Name: "p", Mode: mode, Limit: 1_000_000_000, Window: time.Second}},
		Syncer:   redisSyncer(b, srv),
		// The lease in one word: BenchmarkHotKeyParallel measures stripes.
		HotKeyRate: -1,
	})
	require.NoError(b, err)
	b.Cleanup(func() { l.Close() })
	return l
}

// warm makes key existing and leased.
func warm(b *testing.B, l *hybrid.Limiter, key string) {
	b.Helper()
	for range 1000 {
		_, err := l.Allow(key)
		require.NoError(b, err)
	}
	require.NoError(b, l.SyncOnce(context.Background()))
}

func BenchmarkHybridAllow(b *testing.B) {
	srv := redistest.StartServer(b)
	l := benchLimiter(b, srv, hybrid.Hybrid)
	warm(b, l, "k")
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		refused := 0
		for b.Loop() {
			if d, _ := l.Allow("k"); !d.Allowed() {
				refused++
			}
		}
		b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow("k")
			}
		})
	})
}

// BenchmarkAllowNLimit is BenchmarkHybridAllow with the key's limit
// given by each call (the policy's, so that the lease is the same): the
// cost of comparing it with the key's, against Allow in the same run.
func BenchmarkAllowNLimit(b *testing.B) {
	srv := redistest.StartServer(b)
	l := benchLimiter(b, srv, hybrid.Hybrid)
	for range 50 {
		l.AllowNLimit("k", 1, 1_000_000_000, 0)
		time.Sleep(10 * time.Millisecond)
	}
	for _, call := range []bool{false, true} {
		b.Run(map[bool]string{false: "Allow", true: "AllowNLimit"}[call], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if call {
					l.AllowNLimit("k", 1, 1_000_000_000, 0)
				} else {
					l.Allow("k")
				}
			}
		})
	}
}

// BenchmarkLocalGCRA is BenchmarkHybridAllow's baseline: local's token
// bucket alone, on the same machine in the same run.
func BenchmarkLocalGCRA(b *testing.B) {
	l, err := local.New(local.Config{Limit: 1_000_000_000, Window: time.Second})
	require.NoError(b, err)
	l.Allow("k")
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Allow("k")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow("k")
			}
		})
	})
}

// BenchmarkHybridVsStrict offers the same load through a Hybrid and a
// Strict policy and reports, beside ns/op, the Redis commands per admitted
// request, counted by Redis itself (INFO commandstats, commands inside
// scripts included). "hybrid-10k" paces the Hybrid load at 10,000
// requests per second, the rate the target is set at.
func BenchmarkHybridVsStrict(b *testing.B) {
	srv := redistest.StartServer(b)
	run := func(b *testing.B, mode hybrid.Mode, pace time.Duration) {
		l := benchLimiter(b, srv, mode)
		warm(b, l, "k")
		srv.ResetStats(b)
		admitted := 0
		start := time.Now()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if pace > 0 {
				if wait := time.Duration(i)*pace - time.Since(start); wait > 0 {
					time.Sleep(wait)
				}
			}
			if d, _ := l.Allow("k"); d.Allowed() {
				admitted++
			}
		}
		b.StopTimer()
		if pace > 0 {
			// Account for the syncs of the whole paced run, including
			// the one in flight when it ended.
			time.Sleep(100 * time.Millisecond)
		}
		b.ReportMetric(float64(srv.TotalCommands(b))/float64(max(admitted, 1)), "redis-cmds/req")
	}
	b.Run("hybrid", func(b *testing.B) { run(b, hybrid.Hybrid, 0) })
	b.Run("strict", func(b *testing.B) { run(b, hybrid.Strict, 0) })
	b.Run("hybrid-10k", func(b *testing.B) { run(b, hybrid.Hybrid, 100*time.Microsecond) })
}
