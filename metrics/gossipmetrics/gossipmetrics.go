// Package gossipmetrics exports a gossip node's state to Prometheus: its
// members, the keys and peers it tracks, the messages and bytes it
// exchanges, and the time it spends merging what it hears.
//
// It is apart from package metrics so that a program syncing through
// Redis alone does not link memberlist for its metrics. Register one
// Collector per gossip node, beside the Limiter's:
//
//	reg.MustRegister(metrics.NewCollector(l), gossipmetrics.NewCollector(g))
package gossipmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/gossip"
)

// A Collector reads a gossip node's counters (gossip.Gossip.Stats) each
// time it is scraped; it keeps no state of its own. It is safe for
// concurrent use.
//
// Metrics, every one named hybridlimit_gossip_…:
//
//   - members: live members memberlist knows, this node included; keys
//     and peers: the entries of the node's table (peers it holds counts
//     of).
//   - messages_received_total, messages_malformed_total (dropped as
//     undecodable or foreign), messages_dropped_total (arrived while the
//     merge loop was behind).
//   - entries_refused_total: entries dropped at a bound (MaxKeys,
//     MaxPeers) or stamped too far ahead of this node's clock.
//   - updates_queued_total: single-key updates queued for gossip;
//     streams_total and stream_failures_total: batches sent to a peer over
//     a stream; outbox_dropped_total: batches dropped while the sender was
//     behind.
//   - joins_total, join_failures_total, seed_lookup_failures_total.
//   - received_bytes_total, sent_bytes_total: this node's own messages
//     (not memberlist's probes).
//   - merges_total, merge_seconds_total: merges of what was received,
//     and the time they held the table's lock.
type Collector struct {
	g     *gossip.Gossip
	descs []*prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// metric is one exported figure of a gossip.Stats.
type metric struct {
	name, help string
	kind       prometheus.ValueType
	value      func(gossip.Stats) float64
}

var exported = []metric{
	{"members", "Live members memberlist knows, this node included.", prometheus.GaugeValue, func(s gossip.Stats) float64 { return float64(s.Members) }},
	{"keys", "Keys in the node's table.", prometheus.GaugeValue, func(s gossip.Stats) float64 { return float64(s.Keys) }},
	{"peers", "Peers the node's table holds counts of.", prometheus.GaugeValue, func(s gossip.Stats) float64 { return float64(s.Peers) }},
	{"messages_received_total", "Messages received: updates and snapshots.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.Received) }},
	{"messages_malformed_total", "Messages dropped as undecodable or foreign.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.Malformed) }},
	{"messages_dropped_total", "Messages dropped because the merge loop was behind.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.InboxDropped) }},
	{"entries_refused_total", "Entries dropped at a bound, or stamped too far ahead of this node's clock.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.Refused) }},
	{"updates_queued_total", "Single-key updates queued for gossip.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.Queued) }},
	{"streams_total", "Batches of updates sent to a peer over a stream.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.Streamed) }},
	{"stream_failures_total", "Batches of updates a stream failed to deliver.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.StreamFailures) }},
	{"outbox_dropped_total", "Batches of updates dropped because the sender was behind.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.OutboxDropped) }},
	{"joins_total", "Attempts to join seeds or lost peers.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.Joins) }},
	{"join_failures_total", "Attempts to join that failed.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.JoinFailures) }},
	{"seed_lookup_failures_total", "Seed names that failed to resolve.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.SeedLookupFailures) }},
	{"received_bytes_total", "Bytes of the node's messages received (not memberlist's own).", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.BytesReceived) }},
	{"sent_bytes_total", "Bytes of the node's messages sent (not memberlist's own).", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.BytesSent) }},
	{"merges_total", "Merges of received messages.", prometheus.CounterValue, func(s gossip.Stats) float64 { return float64(s.Merges) }},
	{"merge_seconds_total", "Time merges held the node's table.", prometheus.CounterValue, func(s gossip.Stats) float64 { return s.MergeSeconds }},
}

// NewCollector returns a Collector for g.
func NewCollector(g *gossip.Gossip) *Collector {
	c := &Collector{g: g}
	for _, m := range exported {
		c.descs = append(c.descs, prometheus.NewDesc("hybridlimit_gossip_"+m.name, m.help, nil, nil))
	}
	return c
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the node's counters and sends them as metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.Stats()
	for i, m := range exported {
		ch <- prometheus.MustNewConstMetric(c.descs[i], m.kind, m.value(s))
	}
}
