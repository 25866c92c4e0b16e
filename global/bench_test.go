package global_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// BenchmarkSync is one node's sync of N active keys against real Redis on
// loopback. rtt/sync counts the pipelines sent: it must stay 1 however
// many keys there are. Redis's own counts come beside it: script calls
// (evalsha) and commands (inside scripts too) per key, and Redis's CPU
// per key and per sync (INFO cpu), and how long Redis spends in one
// script call (commandstats).
//
//	go test -run '^$' -bench 'Sync$' -benchtime 20x ./global/
func BenchmarkSync(b *testing.B) {
	s := redistest.StartServer(b)
	c := s.DeadlineClient(b)
	counter := &pipelineCounter{byNode: map[string]int{}}
	c.AddHook(counter.hook(s.Addr))
	// 100,000 keys take seconds a round unbatched.
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c, Timeout: 30 * time.Second})
	require.NoError(b, err)
	lim := fleet.Limit{Limit: 1_000_000, Window: time.Second}
	keyCounts := []int{1, 100, 1000, 10_000, 100_000}
	if v := os.Getenv("SYNC_BENCH_KEYS"); v != "" { // e.g. 1000,10000
		keyCounts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			require.NoError(b, err)
			keyCounts = append(keyCounts, n)
		}
	}
	if v := os.Getenv("SYNC_BENCH_BATCH"); v != "" { // keys a script call carries
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		old := global.SetBatchKeysForTest(n)
		b.Cleanup(func() { global.SetBatchKeysForTest(old) })
	}
	for _, n := range keyCounts {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			req := &fleet.Request{Node: "bench", Interval: 100 * time.Millisecond}
			for i := range n {
				req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprint("k", i), Limit: lim, Consumed: 3, Demand: 3})
			}
			// The keys' state exists, as in a steady round; the script
			// is loaded first, by one key's call, so that a fresh Redis's
			// NOSCRIPT does not send the script's text once per call.
			_, err := r.Sync(context.Background(), &fleet.Request{Node: req.Node, Interval: req.Interval, Keys: req.Keys[:1]})
			require.NoError(b, err)
			_, err = r.Sync(context.Background(), req)
			require.NoError(b, err)
			counter.reset()
			s.ResetStats(b)
			cpu := s.CPU(b)
			for b.Loop() {
				resp, err := r.Sync(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				if err := resp.Grants[n-1].Err; err != nil {
					b.Fatal(err)
				}
			}
			cpu = s.CPU(b) - cpu
			trips := 0
			for _, v := range counter.reset() {
				trips += v
			}
			cmds, usec := s.Commands(b), s.CommandTimes(b)
			total := int64(0)
			for _, v := range cmds {
				total += v
			}
			keys := float64(n) * float64(b.N)
			scripts := float64(cmds["evalsha"] + cmds["eval"])
			b.ReportMetric(float64(usec["evalsha"]+usec["eval"])/max(scripts, 1), "µs/script")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/1000, "redis-cpu-ms/sync")
			b.ReportMetric(float64(trips)/float64(b.N), "rtt/sync")
			b.ReportMetric(float64(n), "keys/sync")
			b.ReportMetric(scripts/keys, "scripts/key")
			b.ReportMetric(float64(total)/keys, "cmds/key")
			b.ReportMetric(float64(cpu.Microseconds())/keys, "redis-cpu-µs/key")
		})
	}
}

// BenchmarkStrictAllow is one per-request decision in Redis (strict mode,
// what go-redis/redis_rate does): the baseline the hybrid mode beats.
func BenchmarkStrictAllow(b *testing.B) {
	s := redistest.StartServer(b)
	c := s.DeadlineClient(b)
	r := newSyncer(b, c)
	lim := fleet.Limit{Limit: 1_000_000_000, Window: time.Second}
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

// BenchmarkSyncCluster is BenchmarkSync on a 3-master Redis Cluster,
// where a script call carries only keys of one hash slot: scripts/key
// says how many calls that leaves, summed over the masters.
func BenchmarkSyncCluster(b *testing.B) {
	cl := redistest.StartCluster(b, 3)
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: cl.DeadlineClient(b), Timeout: 30 * time.Second})
	require.NoError(b, err)
	lim := fleet.Limit{Limit: 1_000_000, Window: time.Second}
	for _, n := range []int{1000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			req := &fleet.Request{Node: "bench", Interval: 100 * time.Millisecond}
			for i := range n {
				req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprint("k", i), Limit: lim, Consumed: 3, Demand: 3})
			}
			_, err := r.Sync(context.Background(), req)
			require.NoError(b, err)
			for _, m := range cl.Masters {
				m.ResetStats(b)
			}
			for b.Loop() {
				if _, err := r.Sync(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			scripts := int64(0)
			for _, m := range cl.Masters {
				c := m.Commands(b)
				scripts += c["evalsha"] + c["eval"]
			}
			b.ReportMetric(float64(scripts)/float64(n)/float64(b.N), "scripts/key")
		})
	}
}

// BenchmarkLeaseNodes is the Redis time of one key's lease, by the
// nodes on the key, each syncing it once an interval (commandstats:
// Redis's own time in the script, a lease batch of one key and of 16).
// The nodes take turns, and a lease in N, the first of each turn, finds
// the aggregate an interval old and scans every node (the aggregate's
// time is deleted before it, outside the time measured): what one
// interval of a fleet of N nodes costs Redis, a lease at a time.
//
//	go test -run '^$' -bench LeaseNodes -benchtime 4000x ./global/
func BenchmarkLeaseNodes(b *testing.B) {
	s := redistest.StartServer(b)
	c := s.Client(b)
	r := newSyncer(b, s.DeadlineClient(b))
	ctx := context.Background()
	// An interval long enough that no node turns stale while the
	// others take their turn: the benchmark decides when leases scan.
	lim := fleet.Limit{Limit: 1_000_000, Window: time.Hour}
	for _, nodes := range []int{1, 10, 100, 1000} {
		reqs := make([]*fleet.Request, nodes)
		var keys []string
		for n := range reqs {
			reqs[n] = &fleet.Request{Node: fmt.Sprint("node-", n), Interval: 10 * time.Second}
			for i := range 16 {
				key := fmt.Sprint("nodes-", nodes, "-", i)
				reqs[n].Keys = append(reqs[n].Keys, fleet.Usage{Key: key, Limit: lim, Demand: 10, Consumed: 1, Series: 5})
				if n == 0 {
					keys = append(keys, global.RedisKeyForTest("hl:", key, "lease"))
				}
			}
			_, err := r.Sync(ctx, reqs[n])
			require.NoError(b, err)
		}
		for _, batch := range []int{1, 16} {
			b.Run(fmt.Sprintf("nodes=%d/batch=%d", nodes, batch), func(b *testing.B) {
				old := global.SetBatchKeysForTest(batch)
				defer global.SetBatchKeysForTest(old)
				s.ResetStats(b)
				i := 0
				for b.Loop() {
					n := i % nodes
					if n == 0 {
						for _, k := range keys {
							require.NoError(b, c.HDel(ctx, k, "aT").Err())
						}
					}
					req := reqs[n]
					for k := range req.Keys {
						req.Keys[k].Total++
					}
					if _, err := r.Sync(ctx, req); err != nil {
						b.Fatal(err)
					}
					i++
				}
				usec := s.CommandTimes(b)["evalsha"]
				b.ReportMetric(float64(usec)/float64(b.N)/float64(len(keys)), "redis-µs/key")
			})
		}
	}
}
