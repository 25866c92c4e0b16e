package sim

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
)

// The simulated network carries what a Gossip (package gossip) sends over
// memberlist, as memberlist v0.7 sends it with the settings gossip.New
// gives it:
//
//   - After each Sync, a node queues its changed keys, one named broadcast
//     per key, in a transmit-limited queue (txQueue), at most
//     gossip.UpdateBudget of them; the rest go at once in stream batches
//     to every member it knows. Every quarter second it queues, under the
//     same budget, the entries due for their refresh.
//   - Every GossipInterval it picks GossipNodes random members (live,
//     suspect, or declared dead less than 30 s ago) and fills one packet
//     of 1,400 bytes per member from the queue; each message in a packet
//     counts a transmission, so an update reaches RetransmitMult ×
//     ceil(log10(N+1)) peers in all before it leaves the queue, fewer if a
//     newer one replaces it. A round whose queue is empty sends nothing.
//   - Every probe interval it pings one member, and the member acks; both
//     carry what fits of their queues beside the ping or ack.
//   - Every push/pull interval (30 s, longer past 32 nodes) it swaps a
//     full snapshot with one random member over a stream.
//   - A member that falls silent is declared dead after a probe, its
//     timeout and the suspicion (detectAfter); a lost member is found
//     again by the re-join every RejoinInterval.
//
// Bytes are counted as memberlist hands them to its transport: messages
// with their framing, the checksum on gossip packets, pings and acks,
// streams with their headers, compressed as memberlist compresses them
// (gossipbytes.go). Left out: memberlist's own broadcasts (joins,
// suspicions), which share the packets for a few seconds around each
// membership change, and indirect probes.
const (
	packetSize    = 1400 // memberlist's UDPBufferSize
	compoundHead  = 2    // compoundHeaderOverhead: type and count
	perMessage    = 2    // compoundOverhead: a message's length in the compound header
	userMsg       = 1    // userMsgOverhead: the type byte before a delegate's message
	checksum      = 5    // the CRC a gossip packet carries to peers of protocol 5
	pingBytes     = 80   // a ping as msgpack: sequence number, names, address
	ackBytes      = 16   // an ack
	pushPullHead  = 24   // a push/pull's header
	nodeStateSize = 60   // one member's state in a push/pull
	coverWithin   = int64(300 * time.Millisecond)
)

// Memberlist's timing as gossip.New sets it.
const (
	rejoinAfter       = int64(gossipsim.RejoinInterval)
	probeEvery        = int64(gossipsim.ProbeInterval)
	tickEvery         = int64(time.Second / 4) // a Gossip's merge loop: refreshes, and garbage every 4th
	pushPullEvery     = int64(30 * time.Second)
	gossipToTheDead   = int64(30 * time.Second)
	pushPullThreshold = 32
)

// detectAfter is how long after a member falls silent its peers declare
// it dead: the probe that finds it (up to a probe interval), the probe's
// timeout, and a suspicion of SuspicionMult × max(1, log10 N) probe
// intervals, stretched SuspicionMaxTimeoutMult times while no other
// member confirms it. Among 6 nodes that is 3.8 s; the gossip package
// measured a minority of 2 in 6 noticing a split after 3.4-4.9 s
// (TestSplitDetectedOnDefaults).
func detectAfter(n int) int64 {
	scale := math.Max(1, math.Log10(float64(max(n, 1))))
	suspicion := float64(gossipsim.SuspicionMaxTimeoutMult*gossipsim.SuspicionMult) * scale * float64(probeEvery)
	return probeEvery + int64(gossipsim.ProbeTimeout) + int64(suspicion)
}

// pushPullAfter is memberlist's push/pull interval among n nodes.
func pushPullAfter(n int) int64 {
	if n <= pushPullThreshold {
		return pushPullEvery
	}
	return int64(math.Ceil(math.Log2(float64(n))-math.Log2(pushPullThreshold))+1) * pushPullEvery
}

// gossipNode is a node's gossip state: the gossip package's Core, its
// transmit queue, and the members its memberlist knows.
type gossipNode struct {
	core   gossipsim.Core
	q      *txQueue
	sees   map[int]bool  // live members, as the Core is told
	dead   map[int]int64 // members declared dead, and when: still gossiped to for 30 s
	ticks  int
	budget gossip.Config      // the Config gossip.UpdateBudget reads
	held   []gossipsim.Update // this sync round's changed updates (hold)
	calls  []int              // how many each of its Sync calls changed
}

// members is how many members n's memberlist counts, itself included.
func (g *gossipNode) members() int { return len(g.sees) + 1 }

// gossipSyncer is one node's Gossip: Sync is local, and what changed goes
// out on the node's next gossip rounds or by stream.
type gossipSyncer struct {
	e *engine
	i int
}

var _ fleet.Syncer = gossipSyncer{}

// Census is what gossip.Gossip.Census answers: the members the node's
// memberlist counts, itself included.
func (s gossipSyncer) Census(context.Context, string, time.Duration) (int, error) {
	return s.e.nodes[s.i].g.members(), nil
}

func (s gossipSyncer) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	n := s.e.nodes[s.i]
	now := s.e.clk.Now()
	s.e.m.syncKeys += int64(len(req.Keys))
	resp, err := n.g.core.Sync(req, now)
	if err == nil {
		s.e.hold(n, n.g.core.Changed(now))
	}
	return resp, err
}

// hold keeps a Sync's changed updates until the Limiter's sync round
// ends (at this same instant), then flushes them call by call as the
// Gossip did. A round of more than 256 keys goes in several calls, and
// which keys share a call is the order of a sync.Map's Range, random
// from run to run; each call has its own UpdateBudget, so which keys
// go by stream would be too. So the round's updates are sorted by name
// and dealt back into calls of the same sizes: as many queued and
// streamed as the Gossip would, chosen by key hash rather than by
// chance.
func (e *engine) hold(n *node, ups []gossipsim.Update) {
	g := n.g
	if len(g.calls) == 0 {
		e.at(e.now, func() { e.flushHeld(n) })
	}
	g.held = append(g.held, ups...)
	g.calls = append(g.calls, len(ups))
}

func (e *engine) flushHeld(n *node) {
	g := n.g
	held := g.held
	slices.SortFunc(held, func(a, b gossipsim.Update) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range g.calls {
		if n.active {
			e.flush(n, held[:c])
		}
		held = held[c:]
	}
	clear(g.held)
	g.held, g.calls = g.held[:0], g.calls[:0]
}

// flush is a Gossip's flush: the first UpdateBudget updates join the
// transmit queue, a newer update of a key replacing the queued one; the
// rest go in a stream batch to every member.
func (e *engine) flush(n *node, ups []gossipsim.Update) {
	if len(ups) == 0 {
		return
	}
	g := n.g
	budget := gossipsim.UpdateBudget(g.budget, g.members(), e.cfg.Interval)
	k := min(budget, len(ups))
	for _, u := range ups[:k] {
		g.q.put(u.Name, u.Msg, e.cov.versionOf(n.i, u))
	}
	if rest := ups[k:]; len(rest) > 0 {
		e.stream(n, rest)
	}
}

// stream sends updates in one batch (a Gossip splits at 64 KiB; the
// bytes are about the same) to every member over a stream, compressed.
func (e *engine) stream(n *node, ups []gossipsim.Update) {
	raw := 0
	for i, u := range ups {
		pre := entryOffset(u.Msg)
		if i == 0 {
			raw += pre // the header and origin section, once
		}
		raw += len(u.Msg) - pre
	}
	size := compressed(raw) + userHead
	msgs := make([][]byte, len(ups))
	vers := make([]version, len(ups))
	for i, u := range ups {
		msgs[i], vers[i] = u.Msg, e.cov.versionOf(n.i, u)
	}
	e.cov.sent(vers, e.live-1)
	for j := range e.nodes { // not the map: its order is random
		if !n.g.sees[j] {
			continue
		}
		e.m.syncBytes += int64(size)
		if e.reaches(n.i, j) {
			// A stream takes a handshake before its data: two one-way delays.
			e.schedule(&event{at: e.now + 2*int64(e.cfg.GossipDelay), kind: deliver, node: j, msgs: msgs, vers: vers})
		}
	}
}

// gossipJoin gives node i its Core, introduces it to every active node,
// and starts its gossip rounds, merge-loop ticks, probes and push/pulls,
// each at its own phase.
func (e *engine) gossipJoin(i int) error {
	// A Gossip's incarnation is a random number under 2^53: 8 bytes in
	// every message's varint.
	core, err := gossipsim.NewCore(nodeName(i), max(e.rng.Uint64()>>11, 1), gossip.Config{})
	if err != nil {
		return err
	}
	n := e.nodes[i]
	n.g = &gossipNode{core: core, q: newTxQueue(), sees: map[int]bool{}, dead: map[int]int64{},
		budget: gossip.Config{Name: nodeName(i), GossipInterval: e.cfg.GossipInterval, GossipNodes: e.cfg.GossipFanout}}
	for j, o := range e.nodes {
		if j == i || !o.active || !e.reaches(i, j) {
			continue
		}
		n.g.see(j)
		o.g.see(i)
	}
	phase := func(every int64) int64 { return e.now + int64(e.rng.Float64()*float64(every)) }
	e.schedule(&event{at: phase(int64(e.cfg.GossipInterval)), kind: gossipTick, node: i})
	e.schedule(&event{at: phase(tickEvery), kind: mergeTick, node: i})
	e.schedule(&event{at: phase(probeEvery), kind: probeTick, node: i})
	e.schedule(&event{at: phase(pushPullAfter(e.cfg.Nodes)), kind: pushPullTick, node: i})
	return nil
}

// see records j as a live member of g.
func (g *gossipNode) see(j int) {
	if !g.sees[j] {
		g.sees[j] = true
		delete(g.dead, j)
		g.core.Join(nodeName(j))
	}
}

// gossipLeave sends a leaving node's farewell: its peers free its share
// at once, and their memberlist marks it left, never to be gossiped to.
func (e *engine) gossipLeave(n *node) {
	bye := n.g.core.Farewell()
	for j, o := range e.nodes {
		if o == n || !o.active || !n.g.sees[j] {
			continue
		}
		at := e.now + 2*int64(e.cfg.GossipDelay)
		e.schedule(&event{at: at, kind: deliver, node: j, msgs: [][]byte{bye}})
		e.at(at, func() {
			if o.g.sees[n.i] {
				delete(o.g.sees, n.i)
				o.g.core.Leave(n.g.core.Name(), e.clk.Now())
			}
		})
	}
}

// reaches reports whether messages from node a reach node b.
func (e *engine) reaches(a, b int) bool { return e.nodes[a].group == e.nodes[b].group }

// regroup follows a change of the network: over gossip, the nodes learn
// of it as memberlist would, dead peers after detectAfter, found ones
// after rejoinAfter.
func (e *engine) regroup() {
	if e.cfg.Backend != "gossip" {
		return
	}
	e.at(e.now+rejoinAfter, func() { e.refreshViews(true) })
	e.at(e.now+detectAfter(e.live), func() { e.refreshViews(false) })
}

// refreshViews brings every node's member list in line with the network:
// joining the peers it reaches, or declaring dead those it does not.
func (e *engine) refreshViews(join bool) {
	now := e.clk.Now()
	for a, na := range e.nodes {
		if !na.active {
			continue
		}
		for b, nb := range e.nodes {
			if a == b || !nb.active {
				continue
			}
			switch r := e.reaches(a, b); {
			case r && join:
				na.g.see(b)
			case !r && !join && na.g.sees[b]:
				delete(na.g.sees, b)
				na.g.dead[b] = e.now
				na.g.core.Leave(nodeName(b), now)
			}
		}
	}
}

// mergeTick is a Gossip's merge-loop tick: entries due for a refresh
// join the queue (or a stream), and every fourth tick collects garbage.
func (e *engine) mergeTick(i int) {
	n := e.nodes[i]
	if !n.active {
		return
	}
	e.schedule(&event{at: e.now + tickEvery, kind: mergeTick, node: i})
	now := e.clk.Now()
	e.flush(n, n.g.core.Updates(now))
	if n.g.ticks++; n.g.ticks%4 == 0 {
		n.g.core.Collect(now)
	}
}

// targets picks up to k of the members node i gossips to, at random:
// live ones, and those declared dead less than gossipToTheDead ago.
func (e *engine) targets(i, k int) []int {
	g := e.nodes[i].g
	peers := e.peerBuf[:0]
	for j, o := range e.nodes {
		if g.sees[j] && o.active {
			peers = append(peers, j)
		} else if at, ok := g.dead[j]; ok {
			if e.now-at < gossipToTheDead {
				peers = append(peers, j)
			} else {
				delete(g.dead, j)
			}
		}
	}
	for x := 0; x < min(k, len(peers)); x++ {
		r := x + e.rng.IntN(len(peers)-x)
		peers[x], peers[r] = peers[r], peers[x]
	}
	e.peerBuf = peers
	return peers[:min(k, len(peers))]
}

// gossipRound is one of node i's gossip rounds: a packet to each of
// GossipFanout members, filled from the queue, until the queue is empty.
func (e *engine) gossipRound(i int) {
	n := e.nodes[i]
	if !n.active {
		return
	}
	e.schedule(&event{at: e.now + int64(e.cfg.GossipInterval), kind: gossipTick, node: i})
	if n.g.q.n == 0 {
		return
	}
	for _, j := range e.targets(i, e.cfg.GossipFanout) {
		if !e.packet(n, j, packetSize-compoundHead, 0, checksum) {
			return
		}
	}
}

// probe is node i's probe of one member: a ping and its ack, each
// carrying what fits of its sender's queue.
func (e *engine) probe(i int) {
	n := e.nodes[i]
	if !n.active {
		return
	}
	e.schedule(&event{at: e.now + probeEvery, kind: probeTick, node: i})
	t := e.targets(i, 1)
	if len(t) == 0 || !n.g.sees[t[0]] {
		return
	}
	j := t[0]
	e.packet(n, j, packetSize-pingBytes-compoundHead, pingBytes, 0)
	if e.reaches(i, j) {
		e.packet(e.nodes[j], i, packetSize-ackBytes-compoundHead, ackBytes, 0)
	}
}

// packet sends node n's packet to node j: head bytes of memberlist's own
// (a ping, an ack) and what fits of avail bytes from the queue, plus
// trailer bytes. It reports whether the queue had anything.
func (e *engine) packet(n *node, j, avail, head, trailer int) bool {
	g := n.g
	var items []*queued
	if avail > perMessage+userMsg {
		items = g.q.take(perMessage+userMsg, avail, gossipsim.Transmissions(gossipsim.RetransmitMult, g.members()))
	}
	if len(items) == 0 && head == 0 {
		return false
	}
	size, parts := head+trailer, len(items)
	if head > 0 {
		parts++
	}
	for _, it := range items {
		size += userMsg + len(it.msg)
	}
	if parts > 1 {
		size += compoundHead + perMessage*parts
		// Memberlist compresses a packet when that makes it smaller;
		// the ping or ack's bytes are left as they are.
		raw := 0
		for _, it := range items {
			raw += userMsg + len(it.msg)
		}
		if c := compressed(raw) + head + trailer + compoundHead + perMessage*parts; c < size {
			size = c
		}
	}
	e.m.syncBytes += int64(size)
	if len(items) == 0 {
		return false
	}
	msgs := make([][]byte, len(items))
	vers := make([]version, len(items))
	for x, it := range items {
		msgs[x], vers[x] = it.msg, it.ver
	}
	e.cov.sent(vers, e.live-1)
	if e.reaches(n.i, j) && e.nodes[j].active && (e.cfg.GossipLoss == 0 || e.rng.Float64() >= e.cfg.GossipLoss) {
		e.schedule(&event{at: e.now + int64(e.cfg.GossipDelay), kind: deliver, node: j, msgs: msgs, vers: vers})
	}
	return true
}

// pushPull is node i's push/pull with one random live member: each sends
// the other its snapshot and its member list over a stream.
func (e *engine) pushPull(i int) {
	n := e.nodes[i]
	if !n.active {
		return
	}
	e.schedule(&event{at: e.now + pushPullAfter(n.g.members()), kind: pushPullTick, node: i})
	t := e.targets(i, 1)
	if len(t) == 0 || !n.g.sees[t[0]] || !e.reaches(i, t[0]) {
		return
	}
	now := e.clk.Now()
	for _, p := range [][2]*node{{n, e.nodes[t[0]]}, {e.nodes[t[0]], n}} {
		from, to := p[0], p[1]
		snap := from.g.core.Snapshot(now)
		// Counted uncompressed: how well a snapshot compresses depends
		// on the order of its entries, a map's; once in 30 s, it is
		// little beside the rest.
		e.m.syncBytes += int64(pushPullHead + nodeStateSize*from.g.members() + len(snap))
		if snap != nil {
			e.schedule(&event{at: e.now + 2*int64(e.cfg.GossipDelay), kind: deliver, node: to.i, msgs: [][]byte{snap}})
		}
	}
}

// receive merges what a packet or stream carried into node i.
func (e *engine) receive(ev *event) {
	n := e.nodes[ev.node]
	if !n.active {
		return
	}
	now := e.clk.Now()
	for _, m := range ev.msgs {
		_ = n.g.core.Receive(m, now)
	}
	e.cov.heard(ev.node, ev.vers, e.now)
}
