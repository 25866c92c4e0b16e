package hybrid_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// BenchmarkFleetManyKeys is a fleet of nodes on one real Redis, every
// node deciding the same keys, each key once a second (far under its
// limit, so that keys rest: see rest.go), with the background loops at
// an Interval of 100 ms, and reports what Redis pays for it once the
// keys have rested a Hold: its CPU a second of run (redis-cores), the
// key syncs a second, and the share of rounds longer than the Interval
// (late-rounds). It takes about warm+measure of wall time a case; run it
// alone: -bench FleetManyKeys -benchtime 1x. Issue 21 asks for 8 nodes
// × 100,000 keys under half a core; the cases here are 10,000 keys a
// node, as this machine's 2 cores hold beside Redis, and docs/redis.md
// scales them.
func BenchmarkFleetManyKeys(b *testing.B) {
	for _, c := range []struct {
		nodes, keys int
		idle        time.Duration
	}{
		{8, 10_000, 10 * time.Second},
		{8, 10_000, 30 * time.Second},
	} {
		b.Run(fmt.Sprintf("nodes=%d/keys=%d/idle=%v", c.nodes, c.keys, c.idle), func(b *testing.B) {
			for b.Loop() {
				fleetManyKeys(b, c.nodes, c.keys, c.idle)
			}
		})
	}
}

func fleetManyKeys(b *testing.B, nodes, keys int, idle time.Duration) {
	const interval = 100 * time.Millisecond
	srv := redistest.StartServer(b)
	fleet := make([]*hybrid.Limiter, nodes)
	for n := range fleet {
		l, err := hybrid.New(hybrid.Config{
			Node:        fmt.Sprint("n", n),
			Policies:    []hybrid.Policy{{Name: "p", Limit: 1_000_000, Window: time.Second}},
			Syncer:      redisSyncer(b, srv),
			Interval:    interval,
			IdleTimeout: idle,
			MaxKeys:     2 * keys,
			HotKeyRate:  -1,
		})
		require.NoError(b, err)
		fleet[n] = l
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprint("tenant:", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range fleet {
		wg.Go(func() { // every key once a second, a tenth of them each Interval
			t := time.NewTicker(interval)
			defer t.Stop()
			for i := 0; ; i++ {
				for _, k := range names[i%10*keys/10 : (i%10+1)*keys/10] {
					_, _ = l.Allow(k)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	stats := func() (syncs, rounds, late uint64) {
		for _, l := range fleet {
			s := l.Stats()
			syncs += s.Leases
			rounds += s.Rounds
			late += s.Rounds - s.RoundBuckets[interval.Seconds()]
		}
		return
	}
	time.Sleep(idle + 5*time.Second) // every key past its first Hold
	cpu0, at0 := srv.CPU(b), time.Now()
	syncs0, rounds0, late0 := stats()
	time.Sleep(idle + 5*time.Second)
	cpu1, at1 := srv.CPU(b), time.Now()
	syncs1, rounds1, late1 := stats()
	cancel()
	wg.Wait()
	for _, l := range fleet {
		l.Close()
	}
	secs := at1.Sub(at0).Seconds()
	b.ReportMetric((cpu1-cpu0).Seconds()/secs, "redis-cores")
	b.ReportMetric(float64(syncs1-syncs0)/secs, "key-syncs/s")
	b.ReportMetric(float64(late1-late0)/float64(max(1, rounds1-rounds0)), "late-rounds")
}
