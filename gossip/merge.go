package gossip

import (
	"slices"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// Merging what the network says. No message carries its sender's
// identity (memberlist hands NotifyMsg bare bytes, and a push/pull
// relays every origin's entries), so the table trusts no message to
// speak for a node; it bounds what any message can do instead:
//
//   - State about node X is X's to change. An entry is kept per origin,
//     incarnation and window: a message naming X under another
//     incarnation or window adds an entry beside X's own and never
//     replaces it, so X's own updates go on counting. Within one
//     incarnation and window, counts only grow (the G-counter) and the
//     other fields follow the latest stamp.
//   - Every field is bounded to what a live peer sends: stamps at most
//     one window past this node's wall time, lease TTLs at most
//     maxLeaseTTL, leases at most the policy's capacity (in sync), counts
//     at most maxCount (in decode).
//
// The stamp bound is what makes X's lease, demand and weight X's: a
// forger who knows X's incarnation can send X's entry stamped ahead of
// X's own, but at most a window (plus the clocks' skew) ahead, so X's
// own stamps, its wall time when it syncs, pass the forged one within
// about a window, and X's own figures stand again. A bound on a
// sequence number counted from 1 could not do that: X's would never
// catch up with a forged 2^53.
//   - A farewell frees X's share only until X is heard from again.

const (
	// maxLeaseTTL bounds how long a peer's lease stands here, whatever it
	// claims: a node's TTL is two of its sync intervals.
	maxLeaseTTL = 10 * time.Second
	// maxEntries bounds the peers' entries the table holds, over all
	// keys, whatever MaxKeys and MaxPeers allow (their product is 10^8
	// by default): 2^20 of them took 125 MB of heap (1,024 forged peers
	// sending 2,000 keys each; 203 MB unbounded). At the bound, an entry for a peer and key not yet held is
	// refused and counted in Stats.Refused; entries held go on merging,
	// this node's own keys are always tracked, and room comes back as
	// windows pass and gc forgets what no longer counts.
	maxEntries = 1 << 20
	// maxVariants bounds the entries per peer and key: one per
	// incarnation and window, of which a live peer has one, or two
	// across a restart or a change of policy. More are forged, refused.
	maxVariants = 4
)

// merge applies a decoded message. An update says its origin is alive
// (it, or someone naming it, is talking); a state relays what its sender
// knows; a leave frees its origin's shares until it is heard from again.
func (t *table) merge(m *message, now instant) {
	for i := range m.sections {
		s := &m.sections[i]
		p := t.peerFor(s.name)
		if p == nil {
			t.dropped += uint64(len(s.entries))
			continue
		}
		if p == t.self {
			continue // our own entries, relayed back: we know better
		}
		switch m.kind {
		case kindUpdate:
			p.heard = now.mono
		case kindLeave:
			// Whether it is a member is memberlist's to say, not a
			// message's: a forged farewell frees the node's share until
			// it next speaks, but does not cut this node off its fleet.
			// Whichever incarnation it names: a farewell from an earlier
			// run, arriving late, is undone by the next update.
			t.mark(p, p.alive, true)
		}
		news := false
		for j := range s.entries {
			news = t.mergeEntry(p, s.inc, &s.entries[j], now) || news
		}
		// An update newer than anything heard before says its origin is
		// still here, whatever a farewell said (a forged one, or one from
		// an earlier run). A copy of an update sent before a real
		// farewell, still being gossiped, is not news.
		if news && m.kind == kindUpdate {
			t.mark(p, p.alive, false)
		}
	}
}

// mergeEntry merges one peer's entry for one key, and takes what the peer
// newly consumed out of this node's reconstruction of the key's bucket.
// It reports whether e was newer (a later stamp) than what the table
// held.
//
// An entry stamped more than one window past this node's wall time is
// refused: nodes must agree on the time within a window (or they would
// count in different windows), and a stamp further ahead is forged. It
// would hide the origin's counts in a window not yet come, and hold its
// lease, demand and weight until its own clock got there.
func (t *table) mergeEntry(p *peer, inc uint64, e *entry, now instant) bool {
	if e.stamp > now.ms()+e.windowMs {
		t.dropped++
		return false
	}
	k := t.keyFor(e.hash, false, now)
	if k == nil {
		t.dropped++
		return false
	}
	// The sender's entries (a few variants at most: incarnations and
	// windows) lie together in k.peers, which is sorted by peer id: a
	// scan of every entry cost a merge time linear in the key's nodes
	// (BenchmarkGossipMergePeers: 142 ns at 4 peers, 798 at 1,024).
	var c *count
	variants := 0
	j := entriesOf(k.peers, p)
	for ; j < len(k.peers) && k.peers[j].p == p; j++ {
		if q := &k.peers[j]; q.inc == inc && q.e.windowMs == e.windowMs {
			c = q
			break
		}
		variants++
	}
	if c == nil {
		if variants >= maxVariants || t.entries >= t.maxEntries {
			t.dropped++
			return false
		}
		t.entries++
		k.peers = slices.Insert(k.peers, j, count{p: p, inc: inc, e: entry{hash: e.hash, windowMs: e.windowMs}})
		c = &k.peers[j]
		p.counts++
	}
	old := c.e
	// The G-counter: per window, the larger count wins. The entry kept
	// is the one with the later stamp, whose epoch is the later one
	// too (both are stamp / windowMs), so ep is the kept entry's epoch.
	ep := max(old.epoch, e.epoch)
	cur := max(old.countAt(ep), e.countAt(ep))
	prev := max(old.countAt(ep-1), e.countAt(ep-1))
	delta := (cur - old.countAt(ep)) + (prev - old.countAt(ep-1))
	next := old
	newer := e.stamp > old.stamp
	if newer {
		next = *e
		next.ttlMs = min(next.ttlMs, uint64(maxLeaseTTL/time.Millisecond))
		c.recvAt = now.mono
	}
	next.epoch, next.cur, next.prev = ep, cur, prev
	if next == c.e {
		return newer
	}
	c.e = next
	if u := k.local; u != nil && u.limit.Algorithm == local.TokenBucket && delta > 0 {
		u.level -= float64(delta)
	}
	return newer
}

// entriesOf is where the entries of peer p lie, or would, in peers
// (sorted by peer id). Where there are few, a scan comparing pointers is
// quicker than a search that reads every probed entry's peer; the id is
// read only to place an entry not there yet.
func entriesOf(peers []count, p *peer) int {
	if len(peers) <= 128 {
		for i := range peers {
			if peers[i].p == p {
				return i
			}
		}
		for i := range peers {
			if peers[i].p.id > p.id {
				return i
			}
		}
		return len(peers)
	}
	lo, hi := 0, len(peers)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if peers[m].p.id < p.id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// join and leave record membership events.
func (t *table) join(name, addr string) {
	p := t.peerFor([]byte(name))
	if p == nil || p == t.self {
		return
	}
	t.mark(p, true, false)
	p.addr = addr
}

func (t *table) leave(name string, now instant) {
	p := t.peers[name]
	if p == nil || p == t.self {
		return
	}
	t.mark(p, false, p.left)
	p.downAt = now.mono
}

// mark sets whether p is a member and whether it left, keeping count of
// the members that have not left.
func (t *table) mark(p *peer, alive, left bool) {
	was := p.alive && !p.left
	p.alive, p.left = alive, left
	switch is := alive && !left; {
	case is && !was:
		t.members++
	case was && !is:
		t.members--
	}
}

// saturate is f as an int64, MaxInt64 past it, and 0 below 0 or NaN.
func saturate(f float64) int64 {
	switch {
	case !(f > 0):
		return 0
	case f >= 1<<63:
		return 1<<63 - 1
	}
	return int64(f)
}
