package hybrid_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// hotLimiter is a Limiter on a manual clock that stripes keys offered
// 1,000 requests per second or more over 4 stripes (or never, if stripes
// is 1).
func hotLimiter(t *testing.T, s fleet.Syncer, stripes int) (*hybrid.Limiter, func(time.Duration)) {
	t.Helper()
	l, clk := manual(t, hybrid.Config{Syncer: s, HotKeyRate: 1000, HotKeyStripes: stripes,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}})
	return l, func(d time.Duration) { clk.Advance(d) }
}

// admitParallel offers n requests for key from 4 goroutines and returns
// how many were admitted.
func admitParallel(l *hybrid.Limiter, key string, n int) int {
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range n / 4 {
				if d, err := l.Allow(key); err == nil && d.Allowed() {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(ok.Load())
}

// TestStripedAccounting drives a key hot, then cold again, from several
// goroutines, and checks that it is striped and merged back, and that
// every admission is reported to the fleet exactly once.
func TestStripedAccounting(t *testing.T) {
	t.Parallel()
	s := newScripted(1<<40, "k")
	l, advance := hotLimiter(t, s, 4)
	ctx := context.Background()
	total := 0
	step := func(n int) {
		total += admitParallel(l, "k", n)
		advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(ctx))
	}
	for range 5 {
		step(4000) // 40,000/s offered
	}
	hot := l.HotKeys()
	require.Len(t, hot, 1)
	assert.Equal(t, "k", hot[0].Key)
	assert.Equal(t, 4, hot[0].Stripes)
	assert.Greater(t, hot[0].Rate, 1000.0)
	for range 20 {
		step(4000)
	}
	for range 30 {
		step(8) // 80/s: cools below half the threshold
	}
	assert.Empty(t, l.HotKeys(), "merged back")
	for range 3 {
		step(4000)
	}
	step(0)
	assert.Equal(t, int64(total), s.consumed("k"), "every admission reported once, across split and merge")
}

// TestStripingAdmitsTheSame offers the same serial sequence to a striped
// and an unstriped Limiter, each with a fleet of 50,000 tokens in all, and
// checks that they admit the same within 1%, interval by interval too:
// no burst at the split or the merge.
func TestStripingAdmitsTheSame(t *testing.T) {
	t.Parallel()
	run := func(stripes int) (total int, per []int) {
		s := newScripted(50_000, "k")
		l, advance := hotLimiter(t, s, stripes)
		for i := range 60 {
			n := 2000 // 20,000/s
			if i >= 30 && i < 40 {
				n = 5 // cools: the striped key merges back
			}
			got := admit(t, l, "k", n)
			total += got
			per = append(per, got)
			advance(100 * time.Millisecond)
			require.NoError(t, l.SyncOnce(context.Background()))
		}
		return total, per
	}
	single, perSingle := run(1)
	striped, perStriped := run(4)
	t.Logf("admitted: single %d, striped %d", single, striped)
	assert.InDelta(t, single, striped, 0.01*50_000, "the same total within 1%% of the fleet's tokens")
	for i := range perSingle {
		assert.LessOrEqual(t, perStriped[i], perSingle[i]+20, "interval %d: no burst", i)
	}
}

// BenchmarkHotKeyParallel admits one key from every P, with the lease in
// one word (single) and striped, two stripes per core whatever -cpu says
// (striped), the sync
// loop refilling it in the background from an in-memory fleet with
// tokens to spare. Run with -cpu 1,2: striped must not lose throughput
// going to 2 CPUs, and must be at least as fast as single there.
//
//	go test -run '^$' -bench HotKeyParallel -cpu 1,2 -count 6 ./hybrid/
func BenchmarkHotKeyParallel(b *testing.B) {
	for _, mode := range []string{"single", "striped"} {
		b.Run(mode, func(b *testing.B) {
			stripes, rate := 1, -1.0
			if mode == "striped" {
				// 2 per core, as the default gives at GOMAXPROCS = NumCPU,
				// from the first sync.
				stripes, rate = 2*runtime.NumCPU(), 1
			}
			s := newScripted(1<<50, "k")
			l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: s, HotKeyRate: rate, HotKeyStripes: stripes,
				Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000_000, Window: time.Second}}})
			require.NoError(b, err)
			defer l.Close()
			for range 3 {
				for range 100_000 {
					_, _ = l.Allow("k")
				}
				require.NoError(b, l.SyncOnce(context.Background()))
			}
			if mode == "striped" {
				require.Len(b, l.HotKeys(), 1, "striped")
			}
			var refused atomic.Int64
			before, start := s.calls(), time.Now()

			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				n := int64(0)
				for pb.Next() {
					if d, _ := l.Allow("k"); !d.Allowed() {
						n++
					}
				}
				refused.Add(n)
			})
			b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
			b.ReportMetric(float64(s.calls()-before)/time.Since(start).Seconds(), "syncs/s")
		})
	}
}
