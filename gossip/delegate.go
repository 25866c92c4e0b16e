package gossip

import (
	"bytes"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate is the Gossip as memberlist's Delegate: the methods are kept
// off Gossip's own method set, since users never call them.
type delegate Gossip

var _ memberlist.Delegate = (*delegate)(nil)

// NodeMeta is empty: a node's state travels in its updates.
func (d *delegate) NodeMeta(limit int) []byte { return nil }

// NotifyMsg hands a copy of b to the merge loop. It never blocks
// memberlist's packet handler: if the loop is behind, the message is
// dropped and counted, and the sender's next update, which carries
// the same counts and more, makes up for it.
func (d *delegate) NotifyMsg(b []byte) {
	if len(b) == 0 {
		return
	}
	d.stats.bytesIn.Add(uint64(len(b)))
	if len(b) >= headerLen && b[2] == kindDocument {
		// Rare, and up to maxDocument: kept at once rather than queued.
		(*Gossip)(d).receiveDocument(b)
		return
	}
	select {
	case d.inbox <- append([]byte(nil), b...):
	default:
		d.stats.inboxDropped.Add(1)
	}
}

// GetBroadcasts returns queued updates to piggyback on a gossip packet.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	out := d.queue.GetBroadcasts(overhead, limit)
	for _, b := range out {
		d.stats.bytesOut.Add(uint64(len(b)))
	}
	return out
}

// LocalState is this node's side of a push/pull: a snapshot of every
// active entry it knows, its own first, at most MaxSnapshotKeys of them,
// bundled with the documents it holds, if any (document.go).
func (d *delegate) LocalState(join bool) []byte {
	g := (*Gossip)(d)
	docs := g.documents() // encoded before mu is taken: up to 2 MiB
	now := g.now()
	g.lock()
	var w encoder
	out := g.core.tab.snapshot(&w, g.cfg.MaxSnapshotKeys, now)
	if len(docs) > 0 {
		if len(out) > 0 {
			docs = append([][]byte{out}, docs...)
		}
		out = bundle(docs...)
	}
	g.mu.Unlock()
	g.stats.bytesOut.Add(uint64(len(out)))
	return out
}

// MergeRemoteState merges a peer's push/pull snapshot, and keeps the
// documents bundled with it that are newer than this node's. Those it
// sends on to every member: a node that learns a version from a push/pull
// missed the save's own stream, and others may have too.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	if len(buf) == 0 {
		return
	}
	g := (*Gossip)(d)
	g.stats.bytesIn.Add(uint64(len(buf)))
	if len(buf) < headerLen || buf[2] != kindBundle {
		g.mergeState(buf)
		return
	}
	err := unbundle(buf, func(p []byte) {
		switch {
		case len(p) < headerLen || p[2] != kindDocument:
			g.mergeState(p)
		case g.receiveDocument(p):
			g.post(bytes.Clone(p))
		}
	})
	if err != nil {
		g.stats.received.Add(1)
		g.stats.malformed.Add(1)
	}
}

// mergeState merges a push/pull's snapshot.
func (g *Gossip) mergeState(buf []byte) {
	now := g.now()
	g.lock()
	start := g.clk.Nanotime()
	g.receive(buf, now)
	g.mu.Unlock()
	g.stats.merged(g.clk.Nanotime() - start)
}

// events is the Gossip as memberlist's EventDelegate.
type events Gossip

var _ memberlist.EventDelegate = (*events)(nil)

// push queues ev for the table and keeps a copy of n, which memberlist
// goes on mutating after the callback returns.
func (e *events) push(ev event, n *memberlist.Node) {
	e.evMu.Lock()
	defer e.evMu.Unlock()
	if n.Name == e.cfg.Name {
		return
	}
	e.events = append(e.events, ev)
	if ev.join {
		e.members[n.Name] = memberlist.Node{Name: n.Name, Addr: slices.Clone(n.Addr), Port: n.Port}
	} else {
		delete(e.members, n.Name)
	}
	members := len(e.members) + 1
	e.nodes.Store(int64(members))
	switch limit := warnFleet(e.cfg.GossipNodes); {
	case members > limit && !e.warned:
		e.warned = true
		e.logger.Printf("[WARN] gossip: %d members: past %d, a sync's updates reach fewer than 3 in 4 peers within 300 ms with GossipNodes %d, "+
			"and the fleet's windows run further over its limits (docs/gossip.md, Limits); raise GossipNodes or the sync interval, or share limits through Redis", members, limit, e.cfg.GossipNodes)
	case members <= limit:
		e.warned = false
	}
}

// warnFleet is the most members a fleet whose nodes gossip to
// gossipNodes peers a round serves within docs/gossip.md's stated bounds:
// 16 at the default 3 (coverage within 300 ms 75% there, 47% at 32), in
// proportion to gossipNodes.
func warnFleet(gossipNodes int) int { return 16 * max(gossipNodes, 1) / defaultGossipNodes }

// NotifyJoin records a member that joined or came back.
func (e *events) NotifyJoin(n *memberlist.Node) {
	e.push(event{name: n.Name, addr: n.Address(), join: true}, n)
}

// NotifyLeave records a member that is gone: its share stays reserved
// for the grace period, unless it said it was leaving (a kindLeave
// message), which n cannot tell: memberlist does not set n.State.
func (e *events) NotifyLeave(n *memberlist.Node) {
	e.push(event{name: n.Name}, n)
}

// NotifyUpdate records a member's new address.
func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.push(event{name: n.Name, addr: n.Address(), join: true}, n)
}

// Stats are a Gossip's counters since New.
type Stats struct {
	// Received is how many messages arrived (updates and snapshots);
	// Malformed of them were dropped as undecodable or foreign.
	Received, Malformed uint64
	// InboxDropped is how many arrived while the merge loop was behind.
	InboxDropped uint64
	// Refused is how many entries were dropped because MaxKeys, MaxPeers
	// or the table's bound was reached, or because they were stamped more
	// than a window past this node's clock (a peer's clock that far
	// ahead, or a forgery), and how many documents (Document) were
	// dropped because this node held the most it holds.
	Refused uint64
	// Queued is how many single-key updates went into the gossip queue;
	// Streamed and StreamFailures count batches sent to a peer over a
	// stream, and OutboxDropped those dropped because the sender was
	// behind.
	Queued, Streamed, StreamFailures, OutboxDropped uint64
	// Joins and JoinFailures count attempts to join seeds or lost peers;
	// SeedLookupFailures, seed names that failed to resolve (each
	// LookupHost call that erred or found no address).
	Joins, JoinFailures, SeedLookupFailures uint64
	// BytesReceived and BytesSent count this node's own messages'
	// bytes: updates and snapshots received, and those it queued for
	// gossip packets, streamed, or gave in a push/pull (memberlist's own
	// probes and headers not included).
	BytesReceived, BytesSent uint64
	// Merges counts the merges of received messages (a batch the merge
	// loop took at once, or a push/pull's snapshot), and MergeSeconds
	// the time they took in all, the table's lock held.
	Merges       uint64
	MergeSeconds float64
	// Keys and Peers are the table's size now; Members, the live members
	// memberlist knows, this node included.
	Keys, Peers, Members int
}

type counters struct {
	received, malformed, inboxDropped               atomic.Uint64
	queued, streamed, streamFailures, outboxDropped atomic.Uint64
	joins, joinFailures, seedLookupFailures         atomic.Uint64
	bytesIn, bytesOut, merges, docsRefused          atomic.Uint64
	mergeNanos                                      atomic.Int64
}

// merged counts a merge that took nanos.
func (c *counters) merged(nanos int64) {
	c.merges.Add(1)
	c.mergeNanos.Add(nanos)
}

// Stats returns the node's counters.
func (g *Gossip) Stats() Stats {
	s := &g.stats
	st := Stats{
		Received: s.received.Load(), Malformed: s.malformed.Load(),
		InboxDropped: s.inboxDropped.Load(),
		Queued:       s.queued.Load(), Streamed: s.streamed.Load(),
		StreamFailures: s.streamFailures.Load(), OutboxDropped: s.outboxDropped.Load(),
		Joins: s.joins.Load(), JoinFailures: s.joinFailures.Load(),
		SeedLookupFailures: s.seedLookupFailures.Load(),
		BytesReceived:      s.bytesIn.Load(), BytesSent: s.bytesOut.Load(),
		Merges: s.merges.Load(), MergeSeconds: time.Duration(s.mergeNanos.Load()).Seconds(),
		Members: len(g.peers()) + 1,
	}
	g.lock()
	st.Keys, st.Peers, st.Refused = len(g.core.tab.keys), len(g.core.tab.peers)-1, g.core.tab.dropped+s.docsRefused.Load()
	g.mu.Unlock()
	return st
}
