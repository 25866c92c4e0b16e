package hybrid

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/breaker"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/partition"
)

// ErrInvalidConfig is wrapped by every error New returns for a Config it
// refuses: errors.Is(err, ErrInvalidConfig) tells a bad Config from a
// failure to start. The message names the field and what it must be.
var ErrInvalidConfig = errors.New("hybrid: invalid Config")

// Defaults for Config's optional fields, which its field comments state.
const (
	// defaultInterval is how often a node syncs with its fleet.
	defaultInterval = 100 * time.Millisecond
	// defaultStrictTimeout bounds one Strict decision's round trip.
	defaultStrictTimeout = 50 * time.Millisecond
	// defaultMaxKeys caps the keys a Limiter tracks.
	defaultMaxKeys = 1 << 20 // as local.Config.MaxKeys
	// defaultMaxKeyLen is the longest key accepted, in bytes.
	defaultMaxKeyLen = 256 // as local.Config.MaxKeyLen
	// defaultIdleTimeout is how long a key goes without requests before
	// its lease is returned and it is forgotten.
	defaultIdleTimeout = 10 * time.Second
	// defaultHotKeyRate is the rate per node at which a key's lease is
	// striped: where one atomic word starts to cost the cores that share
	// it more than the stripes cost a sync.
	defaultHotKeyRate = 50_000
	// defaultHotKeyShards is how many Redis keys a hot Strict key is
	// split into: a multiple of 2, 3, 4 and 6 masters.
	defaultHotKeyShards = 12
	// defaultHotLeaseSyncs is the fleet's lease syncs per second on one
	// Hybrid key at which the key is split into Redis shards: 200 nodes
	// syncing it every defaultInterval.
	defaultHotLeaseSyncs = 2_000
)

// Config describes a Limiter. The zero value of every optional field means
// its documented default.
type Config struct {
	// Node names this node in the fleet; it must be unique and stable for
	// the life of the process. Default: host name, process ID and a
	// random suffix.
	Node string

	// Policies are the limits, at least one. Each key is matched to one
	// policy, once, when first seen.
	Policies []Policy

	// Resolve, if set, picks a key's policy by name; it is called once per
	// key, not per request. Returning "" falls back to matching Prefix.
	Resolve func(key string) string

	// Syncer is the fleet: global.Redis, the gossip syncer, or the
	// simulator's. Required when a policy is Hybrid or Strict; Strict
	// policies also need a store that decides single requests, as
	// global.Redis does (gossip does not). A Syncer that wraps a
	// global.Redis (to instrument it, say) keeps its strict decisions and
	// hot-key sharding if it has a method Unwrap() fleet.Syncer that
	// returns the Redis.
	Syncer fleet.Syncer

	// Failover, if set, is a second fleet, such as a gossip.Gossip over
	// the same nodes, that keeps a fleet-wide view while Syncer cannot be
	// reached. The node reports its consumption to both every Interval,
	// so the failover is warm when it is needed, and takes its leases
	// from Failover only while Syncer's circuit breaker is not closed.
	// Requires Syncer.
	Failover fleet.Syncer

	// Breaker configures the circuit breaker in front of Syncer and of
	// Failover. Zero fields take partition's defaults, except Within,
	// which is at least Failures Intervals so that slow syncs can open it
	// too, and Cooldown, which defaults to Interval: a probe is a single
	// background sync, so trying once per Interval costs the fleet no
	// more than a healthy node does, and the node is back within an
	// Interval or two of the fleet. Strict decisions and early syncs are
	// not attempted unless the breaker is closed.
	Breaker partition.BreakerConfig

	// Ladder is how a node tightens its limit the longer it is cut off
	// from the fleet, or on the minority side of a split: a factor of its
	// last known share that steps down with time. Default
	// partition.DefaultSteps (1 until 5s, 0.5 until 1m, then 0.25).
	Ladder partition.LadderConfig

	// FleetSize is the least number of nodes this node assumes share
	// each quota: when it must decide alone, as a Strict policy must when
	// the fleet is unreachable, and for a new Hybrid key's starter credit,
	// the capacity over the fleet's size, which the node may spend before
	// the key's first sync returns. The fleet tells its size: every grant
	// says how many nodes share its key, and a node no grant tells (its
	// keys all Strict, or none yet) takes it from its Syncer's census
	// (global.Redis, gossip.Gossip), which every node registers with every
	// ten intervals, from its second registration on (so that nodes
	// starting together all count). Until then this is the size. Default 1: the whole quota, which a fleet of
	// nodes that cannot learn their number multiplies during an outage.
	FleetSize int

	// Interval is how often the node syncs with the fleet, give or take a
	// tenth of it in random jitter so nodes spread their calls. Default
	// 100ms; at least a millisecond. Longer intervals mean fewer
	// fleet operations and a larger overshoot bound: see docs/tuning.md.
	Interval time.Duration

	// SyncTimeout bounds one sync's round trip. Default Interval. Once
	// syncs running out of time have opened the fleet's circuit breaker,
	// each probe may take twice as long as the last, up to four times
	// SyncTimeout, until one succeeds: a sync on a new connection to a
	// distant Redis takes three round trips.
	SyncTimeout time.Duration

	// StrictTimeout bounds one Strict decision's round trip. Default
	// 50ms.
	StrictTimeout time.Duration

	// Shares is how a key's quota is split between nodes. Default
	// fleet.DemandWeighted: in proportion to each node's recent demand,
	// with a floor so that an idle node can start. fleet.Equal gives
	// each active node 1/N of the rate whatever its demand.
	Shares fleet.Shares

	// IdleTimeout is how long a key may go without requests before the
	// node hands its lease back and forgets it; while the Limiter tracks
	// more than three quarters of MaxKeys, two Intervals. Default
	// 10s; at least two Intervals. It is also how long a key far from
	// its limit rests between syncs at first: a Syncer that allows it
	// (Redis, for token buckets) grants such a key a lease that stands
	// that long, and the key skips the regular syncs while its lease
	// covers its traffic. Once the key has been in use for two
	// IdleTimeouts, it rests for two minutes, or the IdleTimeout if
	// longer; either at most 10,000 Intervals.
	IdleTimeout time.Duration

	// MaxKeys caps the keys the Limiter tracks; past it, a new key gets
	// ErrTooManyKeys. Past three quarters of it, keys idle for two
	// Intervals are handed back and forgotten, so a client that sends
	// each request under a new key fills the table with at most what it
	// sends in three or four Intervals; size MaxKeys above that. Each
	// Local policy holds up to MaxKeys keys besides, and, unless Resolve
	// is set, forgets them as local.Limiter does (once a key's bucket is
	// full again). Default 1,048,576 (2^20).
	MaxKeys int

	// MaxKeyLen is the longest key accepted, in bytes. Default
	// 256.
	MaxKeyLen int

	// HotKeyRate is the rate, in requests per second offered to this
	// node, at which a Hybrid key's lease is split over HotKeyStripes
	// stripes, so that the cores admitting it do not all contend for one
	// atomic word; it merges back below half that rate. Default
	// 50,000; negative never splits. See docs/hotkeys.md.
	HotKeyRate float64

	// HotKeyStripes is how many stripes a hot key's lease is split over.
	// A request takes from the stripe of the P it runs on, so with at
	// least as many stripes as Ps no two share one. Default two per P
	// (2 × GOMAXPROCS at New, leaving room for GOMAXPROCS to grow), or 1
	// with a single P; 1 never splits. A striped key costs about 4 ns more
	// per decision when nothing contends, and saves far more when cores
	// do: see docs/hotkeys.md.
	HotKeyStripes int

	// HotKeyShards is how many Redis keys a hot Strict key is split
	// into, each with its part of the limit, so that its round trips
	// spread over a Redis Cluster's masters (a multiple of their number
	// spreads them evenly), and the most a hot Hybrid key's leases are
	// split into (see HotLeaseSyncs). Default 12; 1
	// never shards.
	// A node does not split a limit under 10 per shard. Sharding needs a
	// Syncer that keeps a directory of sharded keys, as global.Redis does,
	// which makes every node of the fleet decide a sharded key on its shards,
	// with the shard count of the mark, whatever its own settings; with
	// another Syncer, Strict keys are never sharded.
	HotKeyShards int

	// HotLeaseSyncs is the rate, in lease syncs per second by the whole
	// fleet, at which a Hybrid key's leases are split over Redis shards:
	// min(HotKeyShards, nodes/4) keys spread over the Cluster's masters,
	// each leasing its part of the limit to the nodes that hash to it, so
	// that no one master runs every node's lease script for the key. The
	// rate is estimated as the active nodes times this node's syncs of the
	// key per second; the key merges back once every node finds it below
	// half that. Default 2,000; negative never splits.
	// Like HotKeyShards it needs a Syncer that keeps a directory of
	// sharded keys (global.Redis), and every node follows a split the
	// fleet made, whatever its own setting. See
	// docs/hotkeys.md.
	HotLeaseSyncs float64

	// ManualSync, if set, starts no background goroutine: the caller
	// drives every sync with SyncOnce, as tests do. No early sync runs
	// then: a key whose lease runs low waits for the caller's next
	// SyncOnce.
	ManualSync bool

	// Clock is the time source. Default: the system clock, or in a
	// testing/synctest bubble the bubble's fake clock.
	Clock clock.Clock

	// Logger receives what an operator should know, once each time it
	// happens, never per request: a change of Health level, a key the
	// fleet cannot answer and when it answers again, sync rounds that
	// cannot carry every key. Default: nothing is logged.
	Logger *slog.Logger

	// OnHealthChange, if set, is called when Health's level changes, with
	// the Health before and after: to page, to shed load, to mark the
	// node unready. It is called on the sync loop's goroutine (with
	// ManualSync, SyncOnce's), after a sync round, so the change is seen
	// within about an Interval; it must return quickly, and may call the
	// Limiter's methods. Calls never overlap.
	OnHealthChange func(from, to partition.Health)

	// Tracer, if set, traces each sync round and Strict decision (see
	// Tracer; package tracing adapts OpenTelemetry). Default: nothing is
	// traced, and nothing on any path pays for it.
	Tracer Tracer
}

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Node == "" {
		c.Node = defaultNode()
	}
	if len(c.Policies) == 0 {
		return c, fmt.Errorf("hybrid: Config.Policies is empty; give at least one Policy")
	}
	switch {
	case c.Interval == 0:
		c.Interval = defaultInterval
	case c.Interval < time.Millisecond:
		return c, fmt.Errorf("hybrid: Config.Interval is %v; it must be at least 1ms (or 0 for the default %v)", c.Interval, defaultInterval)
	}
	switch {
	case c.SyncTimeout == 0:
		c.SyncTimeout = c.Interval
	case c.SyncTimeout < 0:
		return c, fmt.Errorf("hybrid: Config.SyncTimeout is %v; it must be positive (or 0 for Interval)", c.SyncTimeout)
	}
	switch {
	case c.StrictTimeout == 0:
		c.StrictTimeout = defaultStrictTimeout
	case c.StrictTimeout < 0:
		return c, fmt.Errorf("hybrid: Config.StrictTimeout is %v; it must be positive (or 0 for the default %v)", c.StrictTimeout, defaultStrictTimeout)
	}
	if c.Shares != fleet.DemandWeighted && c.Shares != fleet.Equal {
		return c, fmt.Errorf("hybrid: Config.Shares %d is not a known strategy", int(c.Shares))
	}
	switch {
	case c.IdleTimeout == 0:
		c.IdleTimeout = max(defaultIdleTimeout, 2*c.Interval)
	case c.IdleTimeout < 2*c.Interval:
		return c, fmt.Errorf("hybrid: Config.IdleTimeout is %v; it must be at least two Intervals (%v)", c.IdleTimeout, 2*c.Interval)
	}
	switch {
	case c.MaxKeys == 0:
		c.MaxKeys = defaultMaxKeys
	case c.MaxKeys < 0:
		return c, fmt.Errorf("hybrid: Config.MaxKeys is %d; it must be positive (or 0 for the default %d)", c.MaxKeys, defaultMaxKeys)
	}
	if c.MaxKeyLen < 0 {
		return c, fmt.Errorf("hybrid: Config.MaxKeyLen is %d; it must be positive (or 0 for the default %d)", c.MaxKeyLen, defaultMaxKeyLen)
	}
	// The default is lowered to what the fleet takes; a length set by
	// hand the fleet would refuse is an error.
	defaulted := c.MaxKeyLen == 0
	if defaulted {
		c.MaxKeyLen = defaultMaxKeyLen
	}
	for _, f := range []struct {
		name string
		s    fleet.Syncer
	}{{"Syncer", c.Syncer}, {"Failover", c.Failover}} {
		m, ok := store.Of(f.s).(store.KeyLenLimiter)
		switch {
		case !ok || isNil(f.s) || c.MaxKeyLen <= m.MaxKeyLen():
		case defaulted:
			c.MaxKeyLen = m.MaxKeyLen()
		default:
			return c, fmt.Errorf("hybrid: Config.MaxKeyLen is %d but Config.%s takes keys of at most %d bytes; lower MaxKeyLen or raise the fleet's", c.MaxKeyLen, f.name, m.MaxKeyLen())
		}
	}
	if c.Clock == nil {
		c.Clock = clock.Default()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if isNil(c.Syncer) {
		return c, fmt.Errorf("hybrid: Config.Syncer is a nil %T; check the error of the call that made it", c.Syncer)
	}
	if isNil(c.Failover) {
		return c, fmt.Errorf("hybrid: Config.Failover is a nil %T; check the error of the call that made it", c.Failover)
	}
	switch {
	case c.Failover != nil && c.Syncer == nil:
		return c, fmt.Errorf("hybrid: Config.Failover is set but Config.Syncer is not; set Syncer, the primary fleet")
	case c.Failover != nil && c.Failover == c.Syncer:
		return c, fmt.Errorf("hybrid: Config.Failover is Config.Syncer; a failover must be a second fleet")
	case c.FleetSize < 0:
		return c, fmt.Errorf("hybrid: Config.FleetSize is %d; it must be positive (or 0 for 1)", c.FleetSize)
	case c.FleetSize == 0:
		c.FleetSize = 1
	}
	switch {
	case c.HotKeyRate == 0:
		c.HotKeyRate = defaultHotKeyRate
	case math.IsNaN(c.HotKeyRate):
		return c, fmt.Errorf("hybrid: Config.HotKeyRate is NaN; give a rate in requests per second (or 0 for the default %d)", defaultHotKeyRate)
	}
	switch {
	case c.HotLeaseSyncs == 0:
		c.HotLeaseSyncs = defaultHotLeaseSyncs
	case math.IsNaN(c.HotLeaseSyncs):
		return c, fmt.Errorf("hybrid: Config.HotLeaseSyncs is NaN; give a rate in syncs per second (or 0 for the default %d)", defaultHotLeaseSyncs)
	}
	switch {
	case c.HotKeyStripes == 0:
		c.HotKeyStripes = 1 // one P: nothing contends
		if p := runtime.GOMAXPROCS(0); p > 1 {
			c.HotKeyStripes = 2 * p
		}
	case c.HotKeyStripes < 0 || c.HotKeyStripes > 1024:
		return c, fmt.Errorf("hybrid: Config.HotKeyStripes is %d; it must be between 1 and 1024 (or 0 for 2 × GOMAXPROCS)", c.HotKeyStripes)
	}
	switch {
	case c.HotKeyShards == 0:
		c.HotKeyShards = defaultHotKeyShards
	case c.HotKeyShards < 0 || c.HotKeyShards > fleet.MaxShards:
		return c, fmt.Errorf("hybrid: Config.HotKeyShards is %d; it must be between 1 and %d (or 0 for the default %d)", c.HotKeyShards, fleet.MaxShards, defaultHotKeyShards)
	}
	if c.Breaker.Failures == 0 {
		c.Breaker.Failures = breaker.DefaultFailures
	}
	if c.Breaker.Within == 0 {
		c.Breaker.Within = max(breaker.DefaultWithin, time.Duration(max(c.Breaker.Failures, 1))*c.Interval)
	}
	if c.Breaker.Cooldown == 0 {
		c.Breaker.Cooldown = c.Interval
	}
	if _, err := breaker.New(c.Breaker); err != nil {
		return c, fmt.Errorf("hybrid: Config.Breaker: %w", err)
	}
	if n := len(c.Ladder.Steps); n > fleet.MaxFallbackSteps {
		return c, fmt.Errorf("hybrid: Config.Ladder.Steps has %d steps; the fleet is told them with every sync, so at most fleet.MaxFallbackSteps (%d)", n, fleet.MaxFallbackSteps)
	}
	if _, err := partition.NewLadder(c.Ladder); err != nil {
		return c, fmt.Errorf("hybrid: Config.Ladder: %w", err)
	}
	return c, nil
}

// isNil reports whether s holds a nil pointer, as a constructor returns
// beside its error: New refuses it rather than fail at the first sync.
func isNil(s fleet.Syncer) bool {
	if s == nil {
		return false
	}
	v := reflect.ValueOf(s)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// defaultNode names a node after its host and process, with a random
// suffix so two processes reusing a PID in containers do not collide.
func defaultNode() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(uint64(time.Now().UnixNano())&0xffffff, 36)
}
