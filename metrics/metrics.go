// Package metrics exports a hybrid.Limiter's state to Prometheus: the
// requests it decided by policy and outcome, its sync rounds and links to
// the fleet, how many keys it tracks, its health, and its hot keys with
// how each is split.
//
// It is a package of its own so that the core packages do not depend on
// the Prometheus client. Register one Collector per Limiter; to tell
// several Limiters of one process apart, register each through
// prometheus.WrapRegistererWith with a label of your own.
//
//	reg.MustRegister(metrics.NewCollector(l))
package metrics

import (
	"crypto/sha256"
	"encoding/hex"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// A Collector reads a Limiter's state each time it is scraped; it keeps
// no state of its own. It is safe for concurrent use.
//
// Metrics:
//
//   - hybridlimit_keys: keys the Limiter tracks.
//
//   - hybridlimit_health: 0 while the last sync reached the fleet, 1
//     degraded (cut off, or refusing because the sync loop runs late),
//     2 emergency (partition.Level).
//
//   - hybridlimit_ladder_factor: the part of its share the node may
//     spend, 1 while healthy.
//
//   - hybridlimit_load_factor{policy}: what the policy's limit is scaled
//     by (hybrid.Limiter.SetLoadFactor), 1 unless set.
//
//   - hybridlimit_failing_keys: keys the fleet, though reachable, answered
//     with an error at their last sync or decision, or whose part of the
//     fleet (a Redis Cluster master) is down; they follow their policy's
//     FailMode (Health.FailingKeys, Health.KeyError).
//
//   - hybridlimit_sync_late_seconds: how late the sync loop runs
//     (Health.Late): a loop starved of CPU starts its syncs late, and
//     leases run dry sooner than they were sized for.
//
//   - hybridlimit_hot_key_stripes{key}: stripes a hot Hybrid key's lease
//     is split over on this node.
//
//   - hybridlimit_hot_key_shards{key}: Redis keys a hot key is split
//     into: a Strict key's decisions, or a Hybrid key's leases.
//
//   - hybridlimit_hot_key_rate{key}: requests per second this node saw
//     offered for a hot key, estimated.
//
//   - hybridlimit_requests_total{policy,mode,outcome}: requests decided,
//     outcome "admitted", "refused", or "shadow" (a Shadow policy would
//     have refused it, and admitted it); a request of cost n counts n. A
//     Hybrid policy's are counted at each sync that reaches the fleet
//     (up to an Interval behind); Local policies' are not counted
//     (hybrid.Stats).
//
//   - hybridlimit_requests_degraded_total{policy,mode}: of the admitted,
//     those the policy's FailMode admitted without the fleet.
//
//   - hybridlimit_requests_refused_total{policy,mode,reason}: the refused,
//     by reason (hybrid.PolicyStats.RefusedBy): "lease" (a Hybrid lease
//     spent while the fleet had room), "limit" (the fleet at its limit),
//     "unreachable" and "key_error" (the FailMode refused), "cost".
//
//   - hybridlimit_sync_rounds_total, hybridlimit_sync_round_errors_total:
//     sync rounds, and those that reached no fleet.
//
//   - hybridlimit_sync_round_duration_seconds: how long rounds take
//     (histogram).
//
//   - hybridlimit_sync_round_keys: Hybrid keys the last round had to sync.
//
//   - hybridlimit_early_syncs_total: early syncs, for keys whose lease
//     ran low before their regular sync.
//
//   - hybridlimit_leases_total, hybridlimit_leased_tokens_total: leases
//     granted to this node's Hybrid keys, and their sizes in all (the
//     ratio of their rates is the mean lease).
//
//   - hybridlimit_keys_forgotten_total: keys forgotten (idle, evicted at
//     MaxKeys, or moved by a change of policy).
//
//   - hybridlimit_fleet_calls_total{fleet}, hybridlimit_fleet_errors_total{fleet,cause}:
//     calls (syncs and Strict decisions) to Config.Syncer ("Syncer") and
//     Config.Failover ("Failover"), and those that did not reach it, by
//     cause ("timeout", "connect", "other").
//
//   - hybridlimit_breaker_state{fleet,state}: 1 for the state the
//     fleet's circuit breaker is in ("closed", "open", "half-open"), 0
//     for the others.
//
//   - hybridlimit_top_refused_requests{key}: requests refused over the
//     last one to two minutes, for the 10 keys refused most
//     (hybrid.Stats.TopRefused, an estimate never under the truth).
//
// Keys are secrets to someone (an API key, an address, a user's email),
// so the key label is by default "h:" and the first 16 hex digits of the
// key's SHA-256: stable, for alerting and dashboards, and matched to a
// key by hashing it, or by reading Limiter.Stats and Limiter.HotKeys in
// the process. RawKeys labels with the keys themselves.
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
	requests, degraded             *prometheus.Desc
	rounds, roundErrors, roundTime *prometheus.Desc
	roundKeys                      *prometheus.Desc
	calls, callErrors, breaker     *prometheus.Desc
	topRefused, loadFactor         *prometheus.Desc
	early, leases, leased, forgot  *prometheus.Desc
	refusedBy                      *prometheus.Desc
	raw                            bool // label keys as they are (RawKeys)
}

// An Option changes what a Collector exports.
type Option func(*Collector)

// RawKeys labels hot and most-refused keys with the keys themselves,
// rather than a hash of each: for keys that are no secret.
func RawKeys() Option { return func(c *Collector) { c.raw = true } }

// label is what key is called in a key label.
func (c *Collector) label(key string) string {
	if c.raw {
		return key
	}
	h := sha256.Sum256([]byte(key))
	return "h:" + hex.EncodeToString(h[:8])
}

// refusalReasons are hybrid.PolicyStats.RefusedBy's keys, in the order
// they are exported.
var refusalReasons = []string{"lease", "limit", "unreachable", "key_error", "cost"}

// errorCauses are hybrid.FleetStats.ErrorsBy's keys, in the order they
// are exported.
var errorCauses = []string{"timeout", "connect", "other"}

// breakerStates are the states hybridlimit_breaker_state reports.
var breakerStates = []string{"closed", "open", "half-open"}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector for l.
func NewCollector(l *hybrid.Limiter, opts ...Option) *Collector {
	key := []string{"key"}
	c := &Collector{
		l:          l,
		keys:       prometheus.NewDesc("hybridlimit_keys", "Keys the limiter tracks.", nil, nil),
		health:     prometheus.NewDesc("hybridlimit_health", "Link to the fleet: 0 healthy, 1 degraded, 2 emergency.", nil, nil),
		factor:     prometheus.NewDesc("hybridlimit_ladder_factor", "Part of its share the node may spend: 1 while healthy, less while cut off.", nil, nil),
		failing:    prometheus.NewDesc("hybridlimit_failing_keys", "Keys the fleet answered with an error; they follow their policy's FailMode.", nil, nil),
		late:       prometheus.NewDesc("hybridlimit_sync_late_seconds", "How late the sync loop runs: its last regular sync's start, or the next's if overdue.", nil, nil),
		hotStripes: prometheus.NewDesc("hybridlimit_hot_key_stripes", "Stripes a hot Hybrid key's lease is split over on this node.", key, nil),
		hotShards:  prometheus.NewDesc("hybridlimit_hot_key_shards", "Redis keys a hot key is split into: a Strict key's decisions, or a Hybrid key's leases.", key, nil),
		hotRate:    prometheus.NewDesc("hybridlimit_hot_key_rate", "Requests per second offered to this node for a hot key, estimated.", key, nil),

		requests:    prometheus.NewDesc("hybridlimit_requests_total", "Requests decided, by policy and outcome; a request of cost n counts n.", []string{"policy", "mode", "outcome"}, nil),
		degraded:    prometheus.NewDesc("hybridlimit_requests_degraded_total", "Requests the policy's FailMode admitted without the fleet.", []string{"policy", "mode"}, nil),
		rounds:      prometheus.NewDesc("hybridlimit_sync_rounds_total", "Sync rounds run.", nil, nil),
		roundErrors: prometheus.NewDesc("hybridlimit_sync_round_errors_total", "Sync rounds that reached no fleet.", nil, nil),
		roundTime:   prometheus.NewDesc("hybridlimit_sync_round_duration_seconds", "How long sync rounds take.", nil, nil),
		roundKeys:   prometheus.NewDesc("hybridlimit_sync_round_keys", "Hybrid keys the last sync round had to sync.", nil, nil),
		calls:       prometheus.NewDesc("hybridlimit_fleet_calls_total", "Calls to a fleet: syncs and Strict decisions.", []string{"fleet"}, nil),
		callErrors:  prometheus.NewDesc("hybridlimit_fleet_errors_total", "Calls to a fleet that did not reach it, by cause: timeout, connect, other.", []string{"fleet", "cause"}, nil),
		breaker:     prometheus.NewDesc("hybridlimit_breaker_state", "1 for the state a fleet's circuit breaker is in, 0 for the others.", []string{"fleet", "state"}, nil),
		loadFactor:  prometheus.NewDesc("hybridlimit_load_factor", "What the policy's limit is scaled by: 1 unless a load factor is set.", []string{"policy"}, nil),
		topRefused:  prometheus.NewDesc("hybridlimit_top_refused_requests", "Requests refused over the last one to two minutes, for the keys refused most (estimate).", key, nil),
		refusedBy:   prometheus.NewDesc("hybridlimit_requests_refused_total", "Requests refused, by policy and reason: lease, limit, unreachable, key_error, cost.", []string{"policy", "mode", "reason"}, nil),
		early:       prometheus.NewDesc("hybridlimit_early_syncs_total", "Early syncs: rounds for keys whose lease ran low before their regular sync.", nil, nil),
		leases:      prometheus.NewDesc("hybridlimit_leases_total", "Leases the fleet granted this node's Hybrid keys.", nil, nil),
		leased:      prometheus.NewDesc("hybridlimit_leased_tokens_total", "The sizes of the leases granted, in all (requests).", nil, nil),
		forgot:      prometheus.NewDesc("hybridlimit_keys_forgotten_total", "Keys forgotten: idle, evicted at MaxKeys, or moved by a change of policy.", nil, nil),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.keys, c.health, c.factor, c.failing, c.late, c.hotStripes, c.hotShards, c.hotRate,
		c.requests, c.degraded, c.rounds, c.roundErrors, c.roundTime, c.roundKeys, c.calls, c.callErrors, c.breaker, c.topRefused, c.loadFactor,
		c.early, c.leases, c.leased, c.forgot, c.refusedBy} {
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
	st := c.l.Stats()
	for _, p := range st.Policies {
		mode := p.Mode.String()
		ch <- prometheus.MustNewConstMetric(c.loadFactor, prometheus.GaugeValue, p.LoadFactor, p.Name)
		if p.Shadowed > 0 { // a series for Shadow policies alone, from their first
			ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(p.Shadowed), p.Name, mode, "shadow")
		}
		if p.Mode == hybrid.Local {
			continue // not counted but for Shadow: see hybrid.Stats
		}
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(p.Admitted), p.Name, mode, "admitted")
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(p.Refused), p.Name, mode, "refused")
		ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.CounterValue, float64(p.Degraded), p.Name, mode)
		for _, reason := range refusalReasons {
			ch <- prometheus.MustNewConstMetric(c.refusedBy, prometheus.CounterValue, float64(p.RefusedBy[reason]), p.Name, mode, reason)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.rounds, prometheus.CounterValue, float64(st.Rounds))
	ch <- prometheus.MustNewConstMetric(c.roundErrors, prometheus.CounterValue, float64(st.RoundErrors))
	delete(st.RoundBuckets, math.Inf(1)) // the count is +Inf's
	ch <- prometheus.MustNewConstHistogram(c.roundTime, st.Rounds, st.RoundSeconds, st.RoundBuckets)
	ch <- prometheus.MustNewConstMetric(c.roundKeys, prometheus.GaugeValue, float64(st.RoundKeys))
	ch <- prometheus.MustNewConstMetric(c.early, prometheus.CounterValue, float64(st.EarlyRounds))
	ch <- prometheus.MustNewConstMetric(c.leases, prometheus.CounterValue, float64(st.Leases))
	ch <- prometheus.MustNewConstMetric(c.leased, prometheus.CounterValue, float64(st.LeasedTokens))
	ch <- prometheus.MustNewConstMetric(c.forgot, prometheus.CounterValue, float64(st.Forgotten))
	for _, f := range st.Fleets {
		ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(f.Calls), f.Name)
		for _, cause := range errorCauses {
			ch <- prometheus.MustNewConstMetric(c.callErrors, prometheus.CounterValue, float64(f.ErrorsBy[cause]), f.Name, cause)
		}
		for _, state := range breakerStates {
			on := 0.0
			if f.Breaker == state {
				on = 1
			}
			ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, on, f.Name, state)
		}
	}
	for _, k := range st.TopRefused {
		ch <- prometheus.MustNewConstMetric(c.topRefused, prometheus.GaugeValue, float64(k.Refused), c.label(k.Key))
	}
	for _, k := range c.l.HotKeys() {
		if k.Stripes > 0 {
			ch <- prometheus.MustNewConstMetric(c.hotStripes, prometheus.GaugeValue, float64(k.Stripes), c.label(k.Key))
		}
		if k.Shards > 0 {
			ch <- prometheus.MustNewConstMetric(c.hotShards, prometheus.GaugeValue, float64(k.Shards), c.label(k.Key))
		}
		ch <- prometheus.MustNewConstMetric(c.hotRate, prometheus.GaugeValue, k.Rate, c.label(k.Key))
	}
}
