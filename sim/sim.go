package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/manual"
	"github.com/hybridlimit/hybridlimit/local"
)

// epoch is the simulated wall clock's start: fixed, so that runs repeat.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// kind is what an event does.
type kind uint8

const (
	arrival      kind = iota // a request reaches a node
	syncDue                  // a node's sync interval is up
	earlyDue                 // a node's early sync, asked for by a key running low
	reach                    // a sync reaches the store
	answer                   // the store's answer reaches the node
	change                   // the scenario changes the fleet or the network
	gossipTick               // a node's gossip round
	mergeTick                // a node's Gossip merge-loop tick: refreshes, garbage
	probeTick                // a node's memberlist probe
	pushPullTick             // a node's memberlist push/pull
	deliver                  // a gossip packet or stream reaches a node
)

// event is one thing that happens at a virtual time.
type event struct {
	at   int64  // nanoseconds since the start
	seq  uint64 // ties broken in the order scheduled
	kind kind
	node int
	gen  int // arrival: the node's generation it was drawn in
	op   *op
	msgs [][]byte  // deliver: the messages
	vers []version // deliver: what they carry, for the coverage figure
	fn   func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// node is one simulated fleet member: a real hybrid.Limiter on the
// virtual clock.
type node struct {
	i       int // its index in engine.nodes
	l       *hybrid.Limiter
	weight  float64 // its part of the offered load while active
	active  bool
	busy    bool // a sync is in flight
	due     bool // a regular sync came due while busy: it runs when the node is free
	group   int  // 0: reaches the store; over gossip, reaches its group only
	g       *gossipNode
	early   bool  // an early sync is scheduled
	earlyAt int64 // when: an earlyDue event for another time is stale
	synced  int64 // when its last sync started
	gen     int   // bumps when its arrivals are rescheduled
}

// engine runs one simulation.
type engine struct {
	cfg   Config
	clk   *clock.Manual
	rng   *rand.Rand
	q     queue
	seq   uint64
	now   int64
	st    store
	nodes []*node
	ideal *local.Limiter
	pol   hybrid.Policy
	keys  []string
	pick  func() int // draws a key index
	burst func(at int64) (factor float64, until int64)

	pend    map[*op]pending // syncs in flight
	m       metrics
	live    int     // nodes in the fleet now
	weight  float64 // their weights' sum: the load balancer's split
	changes []int64 // when the scenario changed the fleet or the network

	cov     *coverage // gossip only
	peerBuf []int     // targets', reused
}

// Run simulates cfg and measures the fleet against an ideal single
// limiter fed the same arrivals.
func Run(cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &engine{
		cfg: cfg,
		clk: clock.NewManual(epoch),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		st:  store{keys: map[string]*lease{}, ops: make(chan *op)},
	}
	e.pol = hybrid.Policy{Name: "sim", Algorithm: cfg.Algorithm, Limit: cfg.Limit, Window: cfg.Window}
	e.ideal, err = local.New(local.Config{Algorithm: cfg.Algorithm, Limit: cfg.Limit, Window: cfg.Window, Clock: e.clk, MaxKeys: 1 << 20})
	if err != nil {
		return nil, err
	}
	if cfg.Backend == "gossip" {
		e.cov = newCoverage(cfg.Nodes+1, epoch.UnixMilli(), int64(cfg.Duration)) // churn adds a node
	}
	if err := e.scenario(); err != nil {
		return nil, err
	}
	e.m.init(len(e.keys), cfg)
	e.loop()
	e.finish()
	return e.m.result(e), nil
}

// schedule queues an event.
func (e *engine) schedule(ev *event) {
	e.seq++
	ev.seq = e.seq
	heap.Push(&e.q, ev)
}

// at schedules fn at t.
func (e *engine) at(t int64, fn func()) {
	e.schedule(&event{at: t, kind: change, fn: fn})
}

// join starts node i at the current time.
func (e *engine) join(i int) error {
	for len(e.nodes) <= i {
		e.nodes = append(e.nodes, &node{i: len(e.nodes)})
	}
	n := e.nodes[i]
	var fleet fleet.Syncer = syncer{&e.st, i}
	if e.cfg.Backend == "gossip" {
		if err := e.gossipJoin(i); err != nil {
			return err
		}
		fleet = gossipSyncer{e, i}
	}
	l, err := hybrid.New(hybrid.Config{
		Node: nodeName(i), Policies: []hybrid.Policy{e.pol},
		Syncer: fleet, Interval: e.cfg.Interval, Shares: e.cfg.Shares,
		ManualSync: true, Clock: e.clk, MaxKeys: max(1<<20, 2*len(e.keys)),
	})
	if err != nil {
		return err
	}
	n.l, n.active, n.busy = l, true, false
	e.schedule(&event{at: e.now + e.jitter(), kind: syncDue, node: i})
	e.reschedule()
	return nil
}

// leave closes node n, handing its leases back, once no sync of its is
// in flight.
func (e *engine) leave(n *node) {
	if n.busy {
		e.at(e.now+max(int64(e.cfg.RTT), 1), func() { e.leave(n) })
		return
	}
	e.call(n, func() { _ = n.l.Close() })
	n.active = false
	if e.cfg.Backend == "gossip" {
		e.gossipLeave(n)
	}
	e.reschedule()
}

func nodeName(i int) string { return "node-" + strconv.Itoa(i) }

// jitter is a sync interval give or take a tenth, as the Limiter's own
// loop draws it.
func (e *engine) jitter() int64 {
	return int64(float64(e.cfg.Interval) * (0.9 + 0.2*e.rng.Float64()))
}

// reschedule draws every active node's next arrival afresh: the load
// balancer's split changed. Poisson arrivals forget their past, so this
// changes nothing else.
func (e *engine) reschedule() {
	e.live, e.weight = 0, 0
	for _, n := range e.nodes {
		if n.active {
			e.live++
			e.weight += n.weight
		}
	}
	for i, n := range e.nodes {
		n.gen++
		if n.active {
			e.nextArrival(i, e.now, nil)
		}
	}
}

// rate is what node i is offered per nanosecond now, before bursts.
func (e *engine) rate(i int) float64 {
	if e.weight == 0 {
		return 0
	}
	return e.nodes[i].weight / e.weight * float64(e.cfg.Nodes) * e.cfg.Rate / 1e9
}

// nextArrival schedules node i's next request after from, in ev if not
// nil: the event just handled, reused rather than allocated per request.
func (e *engine) nextArrival(i int, from int64, ev *event) {
	r := e.rate(i)
	for r > 0 {
		f, until := 1.0, int64(math.MaxInt64)
		if e.burst != nil {
			f, until = e.burst(from)
		}
		if f == 0 {
			from = until
			continue
		}
		at := from + int64(e.rng.ExpFloat64()/(r*f))
		if at >= until {
			from = until // memoryless: start again at the phase's edge
			continue
		}
		if ev == nil {
			ev = &event{}
		}
		*ev = event{at: at, kind: arrival, node: i, gen: e.nodes[i].gen}
		e.schedule(ev)
		return
	}
}

// finish closes every node still in the fleet, handing its leases back,
// and delivers the store's answers still owed, so that no Limiter is left
// waiting in Sync. Nothing it does is measured.
func (e *engine) finish() {
	// The nodes' hand-back at the run's end is not the run's work: a
	// fleet measured for Duration goes on after it. (Counted, it made
	// the store's work 10% more than a real fleet's over 20 s of zipf
	// at 10,000 keys, 33% over 2 s: TestRealityManyKeys.)
	keys, bytes := e.m.syncKeys, e.m.syncBytes
	defer func() { e.m.syncKeys, e.m.syncBytes = keys, bytes }()
	for _, n := range e.nodes {
		if n.active {
			e.leave(n)
		}
	}
	for e.q.Len() > 0 {
		ev := heap.Pop(&e.q).(*event)
		switch ev.kind {
		case reach, answer:
		case change:
			if len(e.pend) == 0 {
				continue // the scenario's; the run is over
			}
		default:
			continue
		}
		e.step(ev)
	}
}

// loop runs events until the end of the run.
func (e *engine) loop() {
	end := int64(e.cfg.Duration)
	for e.q.Len() > 0 {
		ev := heap.Pop(&e.q).(*event)
		if ev.at >= end {
			heap.Push(&e.q, ev) // for finish
			return
		}
		e.step(ev)
	}
}

// step moves the clock to ev and runs it.
func (e *engine) step(ev *event) {
	if ev.at > e.now {
		e.now = ev.at
		e.clk.Set(epoch.Add(time.Duration(e.now)))
	}
	switch ev.kind {
	case arrival:
		e.arrive(ev)
	case syncDue:
		e.sync(ev.node)
	case earlyDue:
		e.early(ev.node)
	case reach:
		if e.nodes[ev.op.node].group != 0 {
			ev.op.err = fmt.Errorf("sim: the store is unreachable: %w", fleet.ErrUnreachable)
		} else {
			e.st.apply(ev.op, epoch.Add(time.Duration(e.now)).UnixMicro())
		}
	case answer:
		e.answer(ev.op)
	case change:
		ev.fn()
	case gossipTick:
		e.gossipRound(ev.node)
	case mergeTick:
		e.mergeTick(ev.node)
	case probeTick:
		e.probe(ev.node)
	case pushPullTick:
		e.pushPull(ev.node)
	case deliver:
		e.receive(ev)
	}
}

// arrive decides one request on its node and on the ideal limiter.
func (e *engine) arrive(ev *event) {
	n := e.nodes[ev.node]
	if !n.active || ev.gen != n.gen {
		return // drawn before the load balancer's split changed
	}
	k := 0
	if e.pick != nil {
		k = e.pick()
	}
	key := e.keys[k]
	held := n.l.Len()
	d, err := n.l.Allow(key)
	ok := err == nil && d.Allowed()
	r, _ := e.ideal.Allow(key)
	e.m.record(k, e.now, ok, r)
	if !n.busy {
		e.askEarly(n, n.l.Len() > held)
	}
	e.nextArrival(ev.node, e.now, ev)
}

// askEarly schedules n's early sync if a key asked for one. The live
// loop wakes at once, and waits out the rest of the key's gap since its
// last sync, here the node's; while a sync is in flight the request
// waits in its channel, as here it waits until the node is free. A key
// the request has just created has no gap to wait (the live loop syncs
// it at once): its sync is not held back by the node's last one.
func (e *engine) askEarly(n *node, created bool) {
	if !manual.EarlyWanted(n.l) {
		return
	}
	at := max(e.now, n.synced+int64(manual.EarlyGap(n.l)))
	if created {
		at = e.now
	}
	if !n.early || at < n.earlyAt {
		n.early, n.earlyAt = true, at
		e.schedule(&event{at: at, kind: earlyDue, node: n.i})
	}
}

// early runs node i's early sync, unless a sync is in flight: then it
// is asked for again when the node is free.
func (e *engine) early(i int) {
	n := e.nodes[i]
	if !n.early || e.now != n.earlyAt {
		return // moved earlier, and already run
	}
	n.early = false
	if !n.active || n.busy {
		return
	}
	n.synced = e.now
	e.call(n, func() { _ = manual.SyncEarly(n.l, context.Background()) })
}

// sync starts node i's regular sync and schedules the next. If a sync is
// in flight, this one runs when it ends, as the live loop's timer fires
// once its early sync returns.
func (e *engine) sync(i int) {
	n := e.nodes[i]
	if !n.active {
		return
	}
	e.schedule(&event{at: e.now + e.jitter(), kind: syncDue, node: i})
	if n.busy {
		n.due = true
		return
	}
	e.regular(n)
}

// regular runs n's regular sync now.
func (e *engine) regular(n *node) {
	n.due = false
	n.synced = e.now
	e.call(n, func() { _ = n.l.SyncOnce(context.Background()) })
}

// free runs what waited for n's sync in flight to end: a regular sync
// that came due, else an early one asked for.
func (e *engine) free(n *node) {
	switch {
	case n.busy || !n.active:
	case n.due:
		e.regular(n)
	default:
		e.askEarly(n, false)
	}
}

// pending maps a sync in flight to its node and its completion.
type pending struct {
	n    *node
	done chan struct{}
}

// call runs f, which may call the store, on its own goroutine, and waits
// until it either returns or waits for the store; in the second case the
// store's answer is scheduled and the node is busy until it comes.
func (e *engine) call(n *node, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	e.await(n, done)
}

func (e *engine) await(n *node, done chan struct{}) {
	select {
	case o := <-e.st.ops:
		n.busy = true
		e.m.syncKeys += int64(len(o.req.Keys))
		e.m.syncBytes += int64(requestBytes(&o.req))
		e.inflightAdd(o, n, done)
		half := int64(e.cfg.RTT) / 2
		e.schedule(&event{at: e.now + half, kind: reach, op: o, node: o.node})
		e.schedule(&event{at: e.now + int64(e.cfg.RTT), kind: answer, op: o, node: o.node})
	case <-done:
	}
}

func (e *engine) inflightAdd(o *op, n *node, done chan struct{}) {
	if e.pend == nil {
		e.pend = map[*op]pending{}
	}
	e.pend[o] = pending{n, done}
}

// answer hands the store's answer to the waiting node and waits for it
// to finish with it.
func (e *engine) answer(o *op) {
	p := e.pend[o]
	delete(e.pend, o)
	if o.resp == nil && o.err == nil {
		o.err = fmt.Errorf("sim: no answer: %w", fleet.ErrUnreachable)
	}
	close(o.reply)
	p.n.busy = false
	e.await(p.n, p.done)
	e.free(p.n)
}

// requestBytes estimates a sync's size on the wire: a script call per
// key with its arguments, and its answer.
func requestBytes(r *fleet.Request) int {
	n := 64
	for _, u := range r.Keys {
		n += len(u.Key) + 2*len(r.Node) + 120
	}
	return n
}
