package hybrid

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/keytable"
	"github.com/hybridlimit/hybridlimit/internal/sketch"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

var (
	// ErrNoPolicy is returned for a key that no policy matches. Add a
	// Policy with an empty Prefix to catch every key.
	ErrNoPolicy = errors.New("hybrid: no policy matches the key; add a Policy with an empty Prefix as the default")

	// ErrKeyTooLong is returned for a key longer than Config.MaxKeyLen.
	ErrKeyTooLong = errors.New("hybrid: key is longer than Config.MaxKeyLen")

	// ErrTooManyKeys is returned for a new key when Config.MaxKeys keys
	// are tracked and none has been idle since the last sync: new keys
	// come faster than idle ones are forgotten. Raise MaxKeys, or
	// shorten IdleTimeout.
	ErrTooManyKeys = errors.New("hybrid: Config.MaxKeys keys are in use; raise MaxKeys or shorten IdleTimeout")
)

// minShare is the floor of a node's demand for an active key, as a part of
// its equal share of one interval's quota: enough that a node that was idle
// holds a lease and can start at once, small enough that a fleet of idle
// nodes holds almost nothing back.
const minShare = 0.01

// policy is a Policy ready for use.
type policy struct {
	Policy
	limit    fleet.Limit
	capacity int64          // Burst for a token bucket, Limit for a window
	perSec   float64        // the fleet's quota per second
	paced    bool           // Hybrid sliding window: leases may be paced (see slidinglease.go)
	local    *local.Limiter // Local: the limiter; FailStatic: the fallback buckets
	counts   *policyCounts  // for Stats; a changed policy keeps its predecessor's
	call     *callLimit     // a policy derived for a limit given by a call; nil if none
}

// Limiter limits requests per key across a fleet of nodes. Each key is
// matched to a Policy once, when first seen; Hybrid keys are then decided
// from a lease on this node's share of the fleet's quota, with one atomic
// compare-and-swap and no allocation, while a background loop syncs the
// leases with the fleet every Config.Interval.
//
// A Limiter is safe for concurrent use. Close it to hand its leases back
// and stop its goroutine.
type Limiter struct {
	cfg     Config
	clk     clock.Clock
	epoch   time.Time // the clock's Now and Nanotime at New, read together
	mono    int64
	table   atomic.Pointer[policyTable] // the policies in force (policies.go)
	tableMu sync.Mutex                  // one SetPolicies at a time
	strict  store.StrictDecider
	charger store.StrictCharger       // nil: Strict admissions without the store are not charged to it
	dir     store.ShardDirectory      // nil: Strict keys are not sharded
	ldir    store.LeaseShardDirectory // nil: Hybrid keys never lease from shards
	census  store.Census              // nil: the fleet's size is learned from leases alone
	unsure  atomic.Bool               // a caller's context ended a Strict call: the loop probes the store (chargeStrict)

	keys      *keytable.Table[keyState]
	inbox     walkInbox    // keys made, and parked keys woken, for the sync loop (walk.go)
	wanted    sync.Map     // string -> callLimit: a limit a call asked for a key, for the next round (calllimit.go)
	crowdedAt atomic.Int64 // when the table was last seen crowded (forget.go); 0 if never

	fleets    []*link          // Syncer, then Failover if set
	hot       *sketch.Detector // samples Strict requests to find hot keys; nil if none can be
	ladder    *partition.Ladder
	health    health
	watch     healthWatch      // the level OnHealthChange last heard
	rounds    roundCounts      // for Stats
	refusals  refusals         // the keys refused most, for Stats
	degraded  atomic.Bool      // the last sync reached no fleet: decisions past the lease follow the FailMode
	factor    atomic.Uint64    // the ladder's factor in force, as float64 bits
	sched     schedule         // when the next regular round is due, and how late the loop runs (round.go)
	nodesHint atomic.Int64     // the most active nodes any grant reported, or FleetSize if set; 0 if neither
	fallback  []partition.Step // the ladder, floor applied, as the fleet is told it (Request.Fallback)

	early  chan *keyState // keys whose lease runs low
	cancel context.CancelFunc
	done   chan struct{}

	keyErrs keyErrors   // keys the fleet answers with an error
	closed  atomic.Bool // Close has begun: no fleet is called again but to hand leases back

	closeOnce sync.Once
	closeErr  error

	syncMu sync.Mutex // one sync at a time; guards keyState's loop fields
	syncs  syncState
}

// New returns a Limiter for cfg, or an error naming the first field of cfg
// that is out of range. Unless cfg.ManualSync is set, it starts the sync
// loop; Close stops it.
func New(cfg Config) (*Limiter, error) {
	sized := cfg.FleetSize > 0
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, cfgerr.Wrap(ErrInvalidConfig, err)
	}
	l := &Limiter{
		keys:  keytable.New(func(k *keyState) string { return k.key }),
		cfg:   cfg,
		clk:   cfg.Clock,
		epoch: cfg.Clock.Now(),
		mono:  cfg.Clock.Nanotime(),
		early: make(chan *keyState, 256),
	}
	offers := store.Of(cfg.Syncer) // what the Syncer's store does beyond syncing
	l.strict, _ = offers.(store.StrictDecider)
	l.census, _ = offers.(store.Census)
	if l.strict != nil {
		l.charger, _ = offers.(store.StrictCharger)
	}
	if sized {
		l.nodesHint.Store(int64(cfg.FleetSize))
	}
	l.ladder, _ = partition.NewLadder(cfg.Ladder) // validated by withDefaults
	l.fallback = fallbackSteps(cfg.Ladder)
	l.factor.Store(math.Float64bits(1))
	if cfg.Syncer != nil {
		l.fleets = append(l.fleets, newFleet(cfg.Syncer, "Syncer", cfg.Breaker))
	}
	if cfg.Failover != nil {
		l.fleets = append(l.fleets, newFleet(cfg.Failover, "Failover", cfg.Breaker))
	}
	t, err := l.newTable(cfg.Policies, "Config.Policies", nil, nil)
	if err != nil {
		return nil, cfgerr.Wrap(ErrInvalidConfig, err)
	}
	l.table.Store(t)
	l.dir, _ = offers.(store.ShardDirectory)
	l.ldir, _ = offers.(store.LeaseShardDirectory)
	if l.strict != nil && l.dir != nil && cfg.HotKeyRate > 0 && cfg.HotKeyShards > 1 {
		// Made whether or not a policy is Strict now: SetPolicies may
		// add one.
		l.hot = sketch.NewDetector(64, 16, cfg.HotKeyRate)
	}
	l.syncs.rng = rand.New(rand.NewPCG(uint64(l.mono), xxh3.HashString(cfg.Node)))
	l.sched.next.Store(int64(cfg.Interval))
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	if !cfg.ManualSync {
		l.done = make(chan struct{})
		go l.run(ctx)
	}
	return l, nil
}

// Config returns the configuration the Limiter was built with, defaults
// filled in, and the policies in force (see SetPolicies).
func (l *Limiter) Config() Config {
	c := l.cfg
	c.Policies = append([]Policy(nil), l.policies().given...)
	return c
}

// now is the Limiter's time: nanoseconds since New.
func (l *Limiter) now() int64 { return l.clk.Nanotime() - l.mono }

// noTime asks the decision to read the clock only if it needs to.
const noTime = math.MinInt64

// Allow reports whether one request for key may happen now. It is
// shorthand for AllowN(key, 1).
func (l *Limiter) Allow(key string) (Decision, error) { return l.allow(key, noTime, 1) }

// AllowN reports whether n requests for key may happen now, and takes them
// if so. A cost n <= 0 takes nothing and is admitted.
//
// An error means the key could not be decided at all: it is too long,
// matches no policy, or would pass MaxKeys; the Decision then refuses. A
// fleet that cannot be reached, or cannot answer for this key, is not an
// error: the policy's FailMode decides, the Decision says it is Degraded,
// and Health counts the keys the fleet refused.
func (l *Limiter) AllowN(key string, n int) (Decision, error) {
	return l.allow(key, noTime, int64(n))
}

func (l *Limiter) allow(key string, now, n int64) (Decision, error) {
	if p := l.localPolicy(key); p != nil {
		return l.allowLocal(p, key, now, n)
	}
	k, ok := l.keys.Load(key)
	if !ok {
		return l.allowNew(key, now, n, nil)
	}
	return l.decide(k, now, n)
}

func (l *Limiter) decide(k *keyState, now, n int64) (Decision, error) {
	p := k.policy()
	if p.Mode != Hybrid {
		return l.decideOther(context.Background(), k, now, n)
	}
	given := now != noTime
	at := now // what ResetAfter is reckoned from
	if !given {
		if p.paced || k.until.Load() != math.MaxInt64 || l.done == nil { // no loop (ManualSync): nothing ticks
			now = l.now()
			at = now
		} else {
			at = l.sched.read.Load() // a token bucket's lease needs no clock: see tick
		}
	}
	if now >= k.until.Load() { // never for noTime: its until is MaxInt64
		return l.short(k, now, n)
	}
	reset := k.resetAt.Load() // before the lease's compare-and-swap, so that its cache miss overlaps the lookup's
	var left int64
	var ok, early bool
	if set := k.stripes.Load(); set != nil {
		left, ok, early = k.takeStriped(set, max(n, 0))
	} else if p.paced {
		at := now
		if given {
			at = min(now, l.now()) // the pace releases by the Limiter's clock, never a caller's later one
		}
		var unpaced int64
		left, unpaced, ok = k.takePaced(at, max(n, 0))
		early = unpaced < k.low.Load()
	} else {
		left, ok = takeWord(&k.word, max(n, 0)) // inlined: the common path
		early = left < k.low.Load()
	}
	if ok {
		if early {
			l.askEarly(k)
		} else if k.parked.Load() {
			// A key at rest, parked while offered nothing: the loop
			// looks at it next round, to count and forecast what it
			// admits (see rests). Once a park: wake clears parked. The
			// flag shares resetAt's cache line, read above.
			l.wake(k)
		}
		return makeDecision(p.capacity, k.fleetRemaining.Load()+left, 0, time.Duration(max(0, reset-at)), false), nil
	}
	if now == noTime {
		now = l.now()
	}
	return l.short(k, now, n)
}

// short decides a Hybrid request the lease cannot cover.
func (l *Limiter) short(k *keyState, now, n int64) (Decision, error) {
	d, err := l.refuse(k, now, n)
	return shadowed(k.policy(), d, n), err
}

func (l *Limiter) refuse(k *keyState, now, n int64) (Decision, error) {
	if k.retired.Load() {
		if c := k.policy().call; c != nil {
			return l.allowLimit(k.key, now, n, callLimit{limit: c.limit, burst: c.burst}) // keeps the call's limit
		}
		return l.allow(k.key, now, n)
	}
	reset := time.Duration(max(0, k.resetAt.Load()-now))
	p := k.policy()
	if n > p.capacity {
		p.countRefused(uint64(n), byCost) // rare: a shared counter is fine
		return makeDecision(p.capacity, 0, local.Never, reset, false), nil
	}
	if l.degraded.Load() || k.failing.Load() {
		return l.failed(k, now, n), nil
	}
	if k.floored.Load() == 1 && l.topUp(k, p) {
		return l.decide(k, now, n)
	}
	if p.paced && now >= k.until.Load() && k.crossEdge(now) {
		l.askEarly(k) // to report the credit, and lease in the new window
		return l.decide(k, now, n)
	}
	k.refused.Add(uint64(n))
	l.wake(k) // a refusal ends a rest (see rests)
	pacing := p.paced && k.pace.pacing(now)
	if (k.low.Load() > 0 || now >= k.until.Load()) && !pacing {
		// A lease whose tokens the pace has yet to release is not
		// short: syncing would only lease them again.
		l.askEarly(k)
	}
	if l.refusedLate(k, now) {
		runtime.Gosched() // see refusedLate
	}
	retry := l.retryAfter(now)
	if pacing {
		retry = max(1, min(retry, time.Duration(n)*k.pace.next(now)))
	}
	return makeDecision(p.capacity, k.fleetRemaining.Load()+k.allowance(), retry, reset, false), nil
}

// retryAfter is how long until the next regular sync brings a new lease.
func (l *Limiter) retryAfter(now int64) time.Duration {
	return time.Duration(max(l.sched.next.Load()-now, int64(l.cfg.Interval/16), 1))
}

// allowNew resolves a key seen for the first time and decides for it,
// under the limit c gives, if not nil (AllowNLimit).
func (l *Limiter) allowNew(key string, now, n int64, c *callLimit) (Decision, error) {
	if len(key) > l.cfg.MaxKeyLen {
		return l.errDecision(ErrKeyTooLong), ErrKeyTooLong
	}
	t := l.policies()
	pol := l.resolve(t, key)
	if pol == nil {
		return l.errDecision(ErrNoPolicy), ErrNoPolicy
	}
	if c != nil {
		var err error
		if pol, err = l.derive(t, pol, c.limit, c.burst); err != nil {
			return l.errDecision(err), err
		}
	}
	if l.keys.Len() >= l.cfg.MaxKeys && !l.makeRoom() {
		return l.errDecision(ErrTooManyKeys), ErrTooManyKeys
	}
	k := &keyState{key: key, hash: uint32(xxh3.HashString(key))}
	k.pol.Store(pol)
	k.gen.Store(t.gen)
	if pol.Mode != Strict {
		k.until.Store(math.MaxInt64) // Strict: 0, the store is called (see strictCut)
	}
	if pol.Mode == Hybrid {
		// Until its first grant, a new key may spend a starter credit:
		// its part of the burst, the capacity over the largest fleet
		// seen (or FleetSize), so that a new key's first burst is not
		// refused and the fleet's starters together hold at most the
		// burst. It is charged to the fleet at the first sync, which is
		// asked for at once. A closed Limiter syncs no more: its new
		// keys get no credit and follow the FailMode. While the table
		// is crowded, a new key may be one forgotten a moment ago (see
		// forget.go), and a fresh credit each time it is seen again
		// would let a client that keeps the table full spend its
		// key's burst over and over: the credit is then the floor.
		if !l.closed.Load() {
			c := l.starter(pol)
			if l.wasCrowded() {
				c = l.floor(pol, 0)
			} else if l.nodesHint.Load() <= 0 {
				k.floored.Store(1) // see topUp
			}
			k.word.Store(uint64(c))
		}
		t := l.now()
		k.activeAt, k.forecastAt, k.lastSync, k.answeredAt = t, t, t-int64(l.cfg.Interval), t
	}
	v, loaded := l.keys.LoadOrStore(k)
	if !loaded {
		l.wanted.Delete(key) // a limit asked for a key of the same name, forgotten since
		l.register(k)
		if pol.Mode == Hybrid {
			l.askEarly(k)
		}
	}
	return l.decide(v, now, n)
}

// starter is a new key's credit before its first grant: an equal part
// of the capacity among the largest fleet seen, at least the floor. A
// node that has seen no fleet yet (no grant, no FleetSize) cannot tell
// its part, and gets only the floor.
func (l *Limiter) starter(p *policy) int64 {
	n := l.nodesHint.Load()
	if n <= 0 {
		return l.floor(p, 0)
	}
	return min(max(p.capacity/n, l.floor(p, 0)), maxAllowance)
}

// topUp adds to k's allowance, once, what its starter credit lacked: a
// key made before the node knew its fleet got only the floor, and one
// whose first grant is slow to come (rounds longer than the Interval,
// at a fleet's start) was refused under its limit meanwhile (8 nodes
// starting 10,000 keys each, each once a second: 1,259 refusals in the
// first 5 s, none after; BenchmarkFleetManyKeys). Once the node knows
// its fleet, and until the key's first grant, the key may spend its
// starter credit as a key made then would. It reports whether it added
// anything.
func (l *Limiter) topUp(k *keyState, p *policy) bool {
	if l.nodesHint.Load() <= 0 || k.hasGrant.Load() || !k.floored.CompareAndSwap(1, 2) {
		return false
	}
	add := l.starter(p) - l.floor(p, 0)
	for add > 0 {
		w := k.word.Load()
		if k.word.CompareAndSwap(w, w&^math.MaxUint32|uint64(min(allowanceOf(w)+add, maxAllowance))) {
			return true
		}
	}
	return false
}

// errDecision is the refusing Decision that comes with err: a key that
// cannot be tracked now may be once keys are forgotten, at the next sync;
// any other key never can be.
func (l *Limiter) errDecision(err error) Decision {
	if errors.Is(err, ErrTooManyKeys) || errors.Is(err, local.ErrTooManyKeys) {
		return refusedDecision(l.cfg.Interval)
	}
	return refusedDecision(local.Never)
}

// askEarly asks the sync loop for an early sync of k, without waiting.
func (l *Limiter) askEarly(k *keyState) {
	// Parked, k is looked at by the next round, which syncs it if
	// nothing else does (ManualSync, a full queue), even with its ask
	// already made: a key may rest with an ask no one took (see rests).
	l.wake(k)
	if k.early.Load() || !k.early.CompareAndSwap(false, true) {
		return
	}
	if l.sched.asked.Load() == 0 {
		l.sched.asked.CompareAndSwap(0, l.now()) // once a lease: see refusedLate
	}
	select {
	case l.early <- k:
	default: // the loop is busy; the regular sync will do
	}
}

// earlyWanted reports whether a key whose lease runs low has asked for an
// early sync. The background loop runs early syncs by itself; with
// Config.ManualSync nothing does, but the simulator (internal/manual).
func (l *Limiter) earlyWanted() bool { return len(l.early) > 0 }

// Len returns the number of keys the Limiter tracks, those its Local
// policies hold included.
func (l *Limiter) Len() int {
	n := l.keys.Len()
	if t := l.policies(); t.localFirst {
		for _, p := range t.list {
			if p.Mode == Local {
				n += p.local.Len()
			}
		}
	}
	return n
}
