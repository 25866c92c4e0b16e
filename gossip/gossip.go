package gossip

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// Gossip is a fleet.Syncer that shares each key's consumption with the
// fleet's other nodes over memberlist gossip, with no central store.
//
// Each Sync records this node's consumption in its own counters, queues
// what changed for the peers, and grants leases from what the node knows
// of the fleet at that moment. It does no network I/O itself: updates go
// out on memberlist's gossip ticks and, when they do not fit, over
// streams from a background goroutine. A Gossip is safe for concurrent
// use.
type Gossip struct {
	cfg   Config
	clk   clock.Clock
	wall0 int64 // the wall clock at New, Unix nanoseconds, read with mono0
	mono0 int64 // the monotonic clock at New
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue
	nodes atomic.Int64 // live members, self included, kept by the event delegate
	every atomic.Int64 // the caller's sync interval, from the last Sync

	mu     sync.Mutex // guards core, joined
	core   *core
	joined bool // a peer has been a member at some point

	evMu     sync.Mutex
	warned   bool                       // the fleet is past what gossip serves within its stated bounds (warnFleet)
	logger   *log.Logger                // memberlist's, and this package's warnings
	events   []event                    // membership events not yet applied to tab
	members  map[string]memberlist.Node // live members, copied from events
	addr     string                     // advertised host:port
	ip       net.IP                     // advertised
	port     int                        // advertised
	bindPort int

	seeds atomic.Pointer[seedSet] // the last resolution of the Seeds

	docMu  sync.Mutex // guards docs; taken after mu, never before
	docs   map[string]storedDoc
	docTag uint64 // the low bits of the versions this run saves

	inbox  chan []byte // updates from NotifyMsg, for the merge loop
	outbox chan []byte // updates too large for gossip, for the sender

	cancel    context.CancelFunc
	stopped   <-chan struct{} // closed when Close stops the goroutines
	wg        sync.WaitGroup
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	stats counters
}

var _ fleet.Syncer = (*Gossip)(nil)

// event is a membership change, applied to the table under mu.
type event struct {
	name, addr string
	join       bool
}

const (
	inboxSize  = 1024
	outboxSize = 8
	// maxBatch is the size at which an update sent by stream is split.
	maxBatch = 64 << 10
)

// New starts a node: it binds its address, resolves and joins the Seeds
// (a node none of whose seeds answer still starts, and keeps trying
// them), and starts gossiping. A node with no seeds, or whose seeds all
// resolve to itself, is a fleet of one. Close stops it.
func New(cfg Config) (*Gossip, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, cfgerr.Wrap(ErrInvalidConfig, err)
	}
	g := &Gossip{
		cfg:    cfg,
		clk:    cfg.Clock,
		inbox:  make(chan []byte, inboxSize),
		outbox: make(chan []byte, outboxSize),

		members: make(map[string]memberlist.Node),
		docs:    make(map[string]storedDoc),
	}
	g.wall0, g.mono0 = cfg.Clock.Now().UnixNano(), cfg.Clock.Nanotime()
	inc := incarnation()
	g.core, g.docTag = newCore(&cfg, inc), docTag(inc)
	g.nodes.Store(1)
	g.every.Store(int64(100 * time.Millisecond))
	g.queue = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return int(g.nodes.Load()) },
		RetransmitMult: cfg.RetransmitMult,
	}

	logger := cfg.Logger
	if logger == nil {
		logger = log.New(io.Discard, "", 0)
	}
	g.logger = logger
	// The transport is made here rather than by memberlist, so that a
	// port of 0 can be read back before memberlist advertises it, and so
	// that it can be wrapped.
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{cfg.BindAddr},
		BindPort:  cfg.BindPort,
		Logger:    logger,
	})
	if err != nil {
		return nil, fmt.Errorf("gossip: listening on %s: %w", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
	}
	var tr memberlist.NodeAwareTransport = nt
	if cfg.WrapTransport != nil {
		tr = cfg.WrapTransport(nt)
	}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr, mc.BindPort = cfg.BindAddr, nt.GetAutoBindPort()
	mc.AdvertiseAddr, mc.AdvertisePort = cfg.AdvertiseAddr, cfg.AdvertisePort
	if cfg.AdvertiseAddr != "" && cfg.AdvertisePort == 0 {
		mc.AdvertisePort = mc.BindPort
	}
	mc.Transport = tr
	mc.Delegate = (*delegate)(g)
	mc.Events = (*events)(g)
	mc.GossipInterval, mc.GossipNodes = cfg.GossipInterval, cfg.GossipNodes
	mc.TCPTimeout = cfg.TCPTimeout
	mc.Label = cfg.Label
	mc.SecretKey, mc.Keyring = cfg.SecretKey, cfg.Keyring
	mc.Logger = logger
	mc.ProbeInterval, mc.ProbeTimeout = defaultProbeInterval, defaultProbeTimeout
	mc.SuspicionMult, mc.SuspicionMaxTimeoutMult = defaultSuspicionMult, defaultSuspicionMaxTimeoutMult
	mc.AwarenessMaxMultiplier = defaultAwarenessMaxMultiplier
	mc.DeadNodeReclaimTime = defaultDeadNodeReclaimTime
	if cfg.Tune != nil {
		cfg.Tune(mc)
		mc.Delegate, mc.Events, mc.Transport = (*delegate)(g), (*events)(g), tr
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("gossip: starting memberlist: %w", err)
	}
	g.ml = ml
	self := ml.LocalNode()
	g.addr, g.ip, g.port, g.bindPort = self.Address(), self.Addr, int(self.Port), nt.GetAutoBindPort()

	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.stopped = cancel, ctx.Done()
	g.joinSeeds(ctx, nil)
	g.wg.Add(3)
	go g.mergeLoop(ctx)
	go g.sendLoop(ctx)
	go g.rejoinLoop(ctx)
	return g, nil
}

// Name returns the node's name in the fleet.
func (g *Gossip) Name() string { return g.cfg.Name }

// Addr returns the host:port peers reach this node at: the one to list in
// other nodes' Seeds.
func (g *Gossip) Addr() string { return g.addr }

// Member is a live member of the fleet.
type Member struct {
	Name string
	Addr string
}

// gossipStore is a Gossip as package hybrid sees it beyond the Syncer
// (see internal/store): a census of the fleet, whose method is not
// Gossip's, so that it is no part of the public API.
type gossipStore struct{ *Gossip }

var _ store.Census = gossipStore{}

func init() {
	store.Register(func(s fleet.Syncer) any {
		if g, ok := s.(*Gossip); ok && g != nil {
			return gossipStore{g}
		}
		return nil
	})
}

// Census returns how many members this node sees live, itself
// included: the fleet's size, for a node that has not yet heard it from
// a key (hybrid shares a new key's first burst, and a Strict policy's
// fail-static bucket, by it). node and horizon are ignored: memberlist
// keeps the membership.
func (g gossipStore) Census(_ context.Context, _ string, _ time.Duration) (int, error) {
	return len(g.peers()) + 1, nil
}

// Members returns the fleet's live members as this node sees them,
// itself included, sorted by name.
func (g *Gossip) Members() []Member {
	nodes := g.peers()
	out := make([]Member, 0, len(nodes)+1)
	out = append(out, Member{Name: g.cfg.Name, Addr: g.addr})
	for _, n := range nodes {
		out = append(out, Member{Name: n.Name, Addr: n.Address()})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// peers returns copies of the other live members. Memberlist's own
// Members hands out nodes it goes on mutating, so they are copied in its
// event callbacks, under its lock, instead.
func (g *Gossip) peers() []memberlist.Node {
	g.evMu.Lock()
	defer g.evMu.Unlock()
	out := make([]memberlist.Node, 0, len(g.members))
	for _, n := range g.members {
		out = append(out, n)
	}
	return out
}

// Join joins the fleet through any of addrs (host:port), returning how
// many answered. Seeds are joined by New and re-joined in the background;
// Join is for addresses learned later.
func (g *Gossip) Join(addrs ...string) (int, error) {
	n, err := g.ml.Join(addrs)
	if err != nil {
		g.stats.joinFailures.Add(1)
		return n, fmt.Errorf("gossip: joining %v: %w", addrs, err)
	}
	g.stats.joins.Add(1)
	return n, nil
}

func (g *Gossip) join(addrs []string) { _, _ = g.Join(addrs...) }

// errClosed is returned by Sync after Close.
var errClosed = fmt.Errorf("gossip: closed: %w", fleet.ErrUnreachable)

// Sync records req's consumption, queues it for the fleet, and grants
// each key a lease from this node's share of what the fleet has left, as
// far as this node knows. It does no network I/O and returns at once.
//
// Sync fails with an error wrapping fleet.ErrUnreachable, recording
// nothing, when this node is cut off: no peer is alive although some did
// not leave, or none of the Seeds other than this node has answered yet
// (nor did they all resolve to this node). The caller should
// then limit on its own and report the consumption again later.
func (g *Gossip) Sync(ctx context.Context, req *fleet.Request) (*fleet.Response, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if g.closed.Load() {
		return nil, errClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("gossip: %w: %w", fleet.ErrUnreachable, err)
	}
	g.every.Store(int64(req.Interval))
	now := g.now()
	g.lock()
	defer g.mu.Unlock()
	if s := g.seeds.Load(); !g.joined && !s.alone() {
		if s.err != nil {
			return nil, fmt.Errorf("gossip: no seed has answered yet (%v): %w", s.err, fleet.ErrUnreachable)
		}
		return nil, fmt.Errorf("gossip: no seed has answered yet: %w", fleet.ErrUnreachable)
	}
	resp, err := g.core.sync(req, now)
	if err != nil {
		return nil, err
	}
	g.flush(now, req.Interval, false)
	return resp, nil
}

// lock takes mu and applies the membership events that came in since.
// Memberlist calls its event delegate with its own locks held, so the
// delegate only queues the events; taking mu there could deadlock with a
// Sync that asks memberlist for its members.
func (g *Gossip) lock() {
	g.mu.Lock()
	g.evMu.Lock()
	evs := g.events
	g.events = nil
	g.evMu.Unlock()
	if len(evs) == 0 {
		return
	}
	now := g.now()
	for _, e := range evs {
		if e.join { // events about this node never get here
			g.core.tab.join(e.name, e.addr)
			g.joined = true
		} else {
			g.core.tab.leave(e.name, now)
		}
	}
}

// now is the node's time. Its wall time, which places it in the fleet's
// windows, is the wall clock at New moved on by the monotonic clock since:
// a wall clock stepped later (by hand, by a bad NTP step) moves no window
// of this node's, so what it spent stays counted in the window it was
// spent in, and its stamps never step back. Peers' stamps are bounded
// against it (mergeEntry).
func (g *Gossip) now() instant {
	mono := g.clk.Nanotime()
	return instant{mono: mono, wall: g.wall0 + (mono - g.mono0)}
}

// incarnation tells this run of a node from its earlier ones: random, not
// the start time, so that a node restarted with its clock behind is not
// taken for an older run of itself. Entries are kept per incarnation, so
// it need only differ, not grow.
func incarnation() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	// Under 2^53, so it survives a float64 (JSON); decode takes any
	// nonzero value, as a node of an older version sent its start time.
	return max(binary.LittleEndian.Uint64(b[:])>>11, 1)
}

// tick is how often the merge loop sends refreshes of entries that have
// not changed; once in four ticks it collects garbage.
const tick = refresh / 4

// mergeLoop merges what NotifyMsg received, sends refreshes between
// syncs, and collects garbage.
func (g *Gossip) mergeLoop(ctx context.Context) {
	defer g.wg.Done()
	t := g.clk.NewTimer(tick)
	defer func() { t.Stop() }()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case b := <-g.inbox:
			// What had queued up by now is merged under the same lock and
			// clock reading; no more, so that a steady stream cannot hold
			// the lock Sync needs, nor merge by a stale clock.
			now := g.now()
			g.lock()
			start := g.clk.Nanotime()
			g.receive(b, now)
			for range len(g.inbox) {
				g.receive(<-g.inbox, now)
			}
			g.mu.Unlock()
			g.stats.merged(g.clk.Nanotime() - start)
		case <-t.C():
			now := g.now()
			g.lock()
			g.flush(now, time.Duration(g.every.Load()), true)
			if n%4 == 0 {
				g.core.tab.gc(now)
			}
			g.mu.Unlock()
			t = g.clk.NewTimer(tick)
		}
	}
}

// receive decodes and merges one message. mu is held.
func (g *Gossip) receive(b []byte, now instant) {
	g.stats.received.Add(1)
	if err := g.core.receive(b, now); err != nil {
		g.stats.malformed.Add(1)
	}
}

// Close sends this node's last counts and a farewell to its peers, so
// that its share goes to the others at once, leaves the memberlist
// cluster, and stops every goroutine. Close the Limiter that uses the
// Gossip first, so that its last consumption is reported. Close is safe
// to call more than once.
func (g *Gossip) Close() error {
	g.closeOnce.Do(func() {
		g.closed.Store(true)
		now := g.now()
		g.lock()
		var last batcher
		for _, k := range g.core.tab.keys {
			if g.core.tab.inUse(k, now) {
				last.add(g.core, &k.own)
			}
		}
		msgs := append(last.done(), g.core.Farewell())
		g.mu.Unlock()
		for _, m := range msgs {
			g.sendAll(m)
		}
		err := g.ml.Leave(g.cfg.TCPTimeout)
		g.cancel()
		g.wg.Wait()
		g.closeErr = errors.Join(err, g.ml.Shutdown())
		if g.closeErr != nil {
			g.closeErr = fmt.Errorf("gossip: closing: %w", g.closeErr)
		}
	})
	return g.closeErr
}
