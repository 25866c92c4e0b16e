package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
	"github.com/hybridlimit/hybridlimit/local"
)

// Config describes one simulated run. The zero value of every field but
// Scenario means its documented default.
type Config struct {
	// Scenario names the load: one of Scenarios. Default "steady".
	Scenario string

	// Nodes is the fleet's size at the start. Default 4.
	Nodes int

	// Rate is the requests per second offered to each node, on average.
	// Default 1000.
	Rate float64

	// Limit is the fleet-wide limit per Window, per key. Default half of
	// what the fleet is offered per Window on one key: twice overloaded.
	Limit int64

	// Window is the limit's period. Default 1s.
	Window time.Duration

	// Algorithm is the policy's: local.TokenBucket (default) or
	// local.SlidingWindow.
	Algorithm local.Algorithm

	// Interval is the nodes' sync interval. Default 100ms.
	Interval time.Duration

	// Shares is how nodes split a key's quota. Default
	// fleet.DemandWeighted.
	Shares fleet.Shares

	// RTT is the round trip from a node to the store and back. Default
	// 1ms.
	RTT time.Duration

	// Duration is the simulated time. Default 60s.
	Duration time.Duration

	// Backend is the fleet the nodes sync with: "redis" (default), a
	// Redis-like store every node reaches in RTT; or "gossip", the gossip
	// package's own state (gossipsim.Core) on every node, over a simulated
	// memberlist that sends what a gossip.Gossip sends as memberlist
	// does: each GossipInterval a packet of at most 1,400 bytes to each
	// of GossipFanout random members, filled from a transmit-limited
	// queue whose updates count one transmission per packet; what
	// overflows gossip.UpdateBudget by stream to every member; probes,
	// push/pulls and failure detection on the gossip package's timings.
	Backend string

	// GossipDelay is a gossip message's one-way delay. Default RTT/2.
	GossipDelay time.Duration

	// GossipLoss is the chance a gossip message is lost, in [0, 1).
	GossipLoss float64

	// GossipFanout is how many peers a node sends to per round. Default
	// gossipsim.GossipNodes.
	GossipFanout int

	// GossipInterval is how often a node gossips. Default
	// gossipsim.GossipInterval.
	GossipInterval time.Duration

	// Keys is how many keys the zipf and hotkey scenarios spread their
	// load over, at most 10,000,000. Default 1,000 (zipf), 100 (hotkey);
	// the other scenarios load one key and take no other.
	Keys int

	// Seed seeds the arrivals and the sync jitter. Default 1. The same
	// Config gives the same Result, byte for byte.
	Seed uint64
}

// Defaults for Config's zero fields.
const (
	defaultNodes    = 4
	defaultRate     = 1000
	defaultWindow   = time.Second
	defaultInterval = 100 * time.Millisecond
	defaultRTT      = time.Millisecond
	defaultDuration = time.Minute

	defaultGossipFanout   = gossipsim.GossipNodes
	defaultGossipInterval = gossipsim.GossipInterval
)

// DefaultConfig returns the Config that Run makes of a zero one, apart from
// the fields whose defaults depend on others (Limit, GossipDelay), left
// zero: a base for flags or a sweep.
func DefaultConfig() Config {
	return Config{
		Scenario: "steady", Backend: "redis", Nodes: defaultNodes, Rate: defaultRate,
		Window: defaultWindow, Interval: defaultInterval, RTT: defaultRTT, Duration: defaultDuration,
		GossipFanout: defaultGossipFanout, GossipInterval: defaultGossipInterval, Seed: 1,
	}
}

// Backends are the fleets Run simulates.
var Backends = []string{"redis", "gossip"}

// Scenarios are the loads Run knows, by name:
//
//   - steady: every node offered Rate, in Poisson arrivals, on one key.
//   - skewed: a load balancer that sends 80% of the traffic to one node.
//   - bursts: every node offered 3 x Rate for 1 s, then nothing for 2 s.
//   - zipf: 1,000 keys (Keys), their popularity Zipf-distributed
//     (s = 1.1).
//   - hotkey: 100 keys (Keys), one taking half the traffic.
//   - churn: the last node leaves a third of the way in, a new one joins
//     at two thirds; the load balancer moves its traffic.
//   - outage: the store is unreachable for every node from a third of
//     the way in, for a sixth of the run (gossip: every node is cut off
//     from every other).
//   - partition: half the nodes cannot reach the store (gossip: the
//     other half) for the middle third of the run.
var Scenarios = []string{"steady", "skewed", "bursts", "zipf", "hotkey", "churn", "outage", "partition"}

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Scenario == "" {
		c.Scenario = "steady"
	}
	if !slices.Contains(Scenarios, c.Scenario) {
		return c, fmt.Errorf("sim: Config.Scenario %q is not one of %s", c.Scenario, strings.Join(Scenarios, ", "))
	}
	fields := []struct {
		name     string
		v        *time.Duration
		def, min time.Duration
	}{
		{"Window", &c.Window, defaultWindow, time.Millisecond},
		{"Interval", &c.Interval, defaultInterval, time.Millisecond},
		{"RTT", &c.RTT, defaultRTT, 0},
		{"Duration", &c.Duration, defaultDuration, time.Millisecond},
		{"GossipInterval", &c.GossipInterval, defaultGossipInterval, time.Millisecond},
	}
	for _, f := range fields {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < f.min || *f.v < 0:
			return c, fmt.Errorf("sim: Config.%s is %v; it must be at least %v (or 0 for %v)", f.name, *f.v, f.min, f.def)
		}
	}
	switch {
	case c.Nodes == 0:
		c.Nodes = defaultNodes
	case c.Nodes < 1 || c.Nodes > 1024:
		return c, fmt.Errorf("sim: Config.Nodes is %d; it must be between 1 and 1024", c.Nodes)
	}
	switch {
	case c.Rate == 0:
		c.Rate = defaultRate
	case !(c.Rate > 0 && c.Rate <= 1e6):
		return c, fmt.Errorf("sim: Config.Rate is %v; it must be in (0, 1e6] requests per second", c.Rate)
	}
	switch {
	case c.Limit == 0:
		c.Limit = max(1, int64(float64(c.Nodes)*c.Rate*c.Window.Seconds()/2))
	case c.Limit < 0:
		return c, fmt.Errorf("sim: Config.Limit is %d; it must be positive", c.Limit)
	}
	if c.Algorithm != local.TokenBucket && c.Algorithm != local.SlidingWindow {
		return c, fmt.Errorf("sim: Config.Algorithm %v is not simulated; use TokenBucket or SlidingWindow", c.Algorithm)
	}
	if c.Shares != fleet.DemandWeighted && c.Shares != fleet.Equal {
		return c, fmt.Errorf("sim: Config.Shares %d is not a known strategy", int(c.Shares))
	}
	if c.Backend == "" {
		c.Backend = "redis"
	}
	if !slices.Contains(Backends, c.Backend) {
		return c, fmt.Errorf("sim: Config.Backend %q is not one of %s", c.Backend, strings.Join(Backends, ", "))
	}
	switch {
	case c.GossipDelay == 0:
		c.GossipDelay = c.RTT / 2
	case c.GossipDelay < 0:
		return c, fmt.Errorf("sim: Config.GossipDelay is %v; it must not be negative", c.GossipDelay)
	}
	if !(c.GossipLoss >= 0 && c.GossipLoss < 1) {
		return c, fmt.Errorf("sim: Config.GossipLoss is %v; it must be in [0, 1)", c.GossipLoss)
	}
	switch {
	case c.GossipFanout == 0:
		c.GossipFanout = defaultGossipFanout
	case c.GossipFanout < 0:
		return c, fmt.Errorf("sim: Config.GossipFanout is %d; it must be positive", c.GossipFanout)
	}
	switch {
	case c.Keys == 0:
	case c.Keys < 2 || c.Keys > 10_000_000:
		return c, fmt.Errorf("sim: Config.Keys is %d; it must be between 2 and 10,000,000 (or 0 for the scenario's)", c.Keys)
	case c.Scenario != "zipf" && c.Scenario != "hotkey":
		return c, fmt.Errorf("sim: Config.Keys is %d, but scenario %q loads one key; only zipf and hotkey take Keys", c.Keys, c.Scenario)
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c, nil
}
