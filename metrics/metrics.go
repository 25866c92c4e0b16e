// Package metrics exports a hybrid.Limiter's state to Prometheus: how
// many keys it tracks, its link to the fleet, and its hot keys with how
// each is split.
//
// It is a package of its own so that the core packages do not depend on
// the Prometheus client. Register one Collector per Limiter; to tell
// several Limiters of one process apart, register each through
// prometheus.WrapRegistererWith with a label of your own.
//
//	reg.MustRegister(metrics.NewCollector(l))
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// A Collector reads a Limiter's state each time it is scraped; it keeps
// no state of its own. It is safe for concurrent use.
//
// Metrics:
//
//   - hybridlimit_keys: keys the Limiter tracks.
//   - hybridlimit_health: 0 while the last sync reached the fleet, 1
//     degraded (cut off, or refusing because the sync loop runs late),
//     2 emergency (partition.Level).
//   - hybridlimit_ladder_factor: the part of its share the node may
//     spend, 1 while healthy.
//   - hybridlimit_failing_keys: keys the fleet, though reachable, answered
//     with an error at their last sync or decision, or whose part of the
//     fleet (a Redis Cluster master) is down; they follow their policy's
//     FailMode (Health.FailingKeys, Health.KeyError).
//   - hybridlimit_sync_late_seconds: how late the sync loop runs
//     (Health.Late): a loop starved of CPU starts its syncs late, and
//     leases run dry sooner than they were sized for.
//   - hybridlimit_hot_key_stripes{key}: stripes a hot Hybrid key's lease
//     is split over on this node.
//   - hybridlimit_hot_key_shards{key}: Redis keys a hot key is split
//     into: a Strict key's decisions, or a Hybrid key's leases.
//   - hybridlimit_hot_key_rate{key}: requests per second this node saw
//     offered for a hot key, estimated.
//
// Hot keys are few by construction (a key must reach Config.HotKeyRate
// on this node, and the Strict sketch keeps 64), so the key label's
// cardinality stays small. A key appears while it is split and is gone
// from the next scrape once merged back.
type Collector struct {
	l                              *hybrid.Limiter
	keys, health, factor, failing  *prometheus.Desc
	late                           *prometheus.Desc
	hotStripes, hotShards, hotRate *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector for l.
func NewCollector(l *hybrid.Limiter) *Collector {
	key := []string{"key"}
	return &Collector{
		l:          l,
		keys:       prometheus.NewDesc("hybridlimit_keys", "Keys the limiter tracks.", nil, nil),
		health:     prometheus.NewDesc("hybridlimit_health", "Link to the fleet: 0 healthy, 1 degraded, 2 emergency.", nil, nil),
		factor:     prometheus.NewDesc("hybridlimit_ladder_factor", "Part of its share the node may spend: 1 while healthy, less while cut off.", nil, nil),
		failing:    prometheus.NewDesc("hybridlimit_failing_keys", "Keys the fleet answered with an error; they follow their policy's FailMode.", nil, nil),
		late:       prometheus.NewDesc("hybridlimit_sync_late_seconds", "How late the sync loop runs: its last regular sync's start, or the next's if overdue.", nil, nil),
		hotStripes: prometheus.NewDesc("hybridlimit_hot_key_stripes", "Stripes a hot Hybrid key's lease is split over on this node.", key, nil),
		hotShards:  prometheus.NewDesc("hybridlimit_hot_key_shards", "Redis keys a hot key is split into: a Strict key's decisions, or a Hybrid key's leases.", key, nil),
		hotRate:    prometheus.NewDesc("hybridlimit_hot_key_rate", "Requests per second offered to this node for a hot key, estimated.", key, nil),
	}
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.keys, c.health, c.factor, c.failing, c.late, c.hotStripes, c.hotShards, c.hotRate} {
		ch <- d
	}
}

// Collect reads the Limiter's state and sends it as metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	h := c.l.Health()
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(c.l.Len()))
	ch <- prometheus.MustNewConstMetric(c.health, prometheus.GaugeValue, float64(h.Level))
	ch <- prometheus.MustNewConstMetric(c.factor, prometheus.GaugeValue, h.Factor)
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(h.FailingKeys))
	ch <- prometheus.MustNewConstMetric(c.late, prometheus.GaugeValue, h.Late.Seconds())
	for _, k := range c.l.HotKeys() {
		if k.Stripes > 0 {
			ch <- prometheus.MustNewConstMetric(c.hotStripes, prometheus.GaugeValue, float64(k.Stripes), k.Key)
		}
		if k.Shards > 0 {
			ch <- prometheus.MustNewConstMetric(c.hotShards, prometheus.GaugeValue, float64(k.Shards), k.Key)
		}
		ch <- prometheus.MustNewConstMetric(c.hotRate, prometheus.GaugeValue, k.Rate, k.Key)
	}
}
