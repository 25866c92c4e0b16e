package gossip_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// BenchmarkGossipBytes measures what a node of a five-node fleet sends,
// memberlist's own probes and gossip included, when every node syncs
// every key every 100 ms: one op is one interval; bytes/s is per node.
func BenchmarkGossipBytes(b *testing.B) {
	for _, keys := range []int{10, 1000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			const interval = 100 * time.Millisecond
			c := gossiptest.Start(b, 5, nil)
			reqs := make([]*fleet.Request, len(c.Nodes))
			for i := range reqs {
				req := &fleet.Request{Interval: interval}
				for k := range keys {
					req.Keys = append(req.Keys, fleet.Usage{Key: fmt.Sprintf("key-%d", k),
						Limit: fleet.Limit{Limit: 1_000_000, Window: time.Second}, Consumed: 10, Demand: 20})
				}
				reqs[i] = req
			}
			syncAll := func() {
				for i, g := range c.Nodes {
					if _, err := g.Sync(b.Context(), reqs[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			syncAll() // every key known everywhere before counting
			time.Sleep(time.Second)
			sent := func() (n int64) {
				for _, tr := range c.Transports {
					n += tr.BytesSent()
				}
				return n
			}
			before, start := sent(), time.Now()
			next := start
			b.ResetTimer()
			for range b.N {
				syncAll()
				next = next.Add(interval)
				time.Sleep(time.Until(next))
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(sent()-before)/float64(len(c.Nodes))/elapsed.Seconds(), "bytes/s")
		})
	}
}
