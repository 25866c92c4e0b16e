package gossip

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// The table is the node's view of the fleet: per key, one entry per node,
// incarnation and window (a G-counter per key and window, plus each
// node's lease, demand and weight; merge.go says why not one per node). It does no I/O and reads no clock; the Gossip feeds it
// messages, membership events and the time.
//
// Counts merge by max per window, so a message applied twice, late or out
// of order changes nothing it should not. Leases, demands and weights are
// not counters: the newest (latest stamp) wins.

const (
	// refresh is how often an unchanged entry is sent again, so that a
	// peer that missed it, or joined since, learns it, and so that peers
	// can tell a live node from a silent one.
	refresh = time.Second
	// staleAfter is how long after its last update a peer's entry stops
	// counting as live: three refreshes, or one and a half lease TTLs for
	// a node that syncs less often than once a second.
	staleAfter = 3 * refresh
	// weightScale is the wire's fixed-point unit for a weight.
	weightScale = math.MaxUint16
)

// instant is a moment on both of the clock's scales: mono (Nanotime) for
// ages and wall (Unix nanoseconds) for windows, which every node must
// agree on.
type instant struct {
	mono int64
	wall int64
}

// peer is what the table knows of another node.
type peer struct {
	id     uint64 // in the order peers were first heard of: a key's entries are sorted by it
	name   string
	inc    uint64 // this node's incarnation; entries carry their peers'
	alive  bool   // memberlist counts it a member
	left   bool   // it left gracefully: its share is free at once
	heard  int64  // when it last sent us an update itself (mono)
	downAt int64  // when memberlist last reported it gone (mono)
	addr   string // its memberlist address, for re-joins
	counts int    // how many keys hold an entry of it
}

// count is one peer's entry for one key.
type count struct {
	p      *peer
	inc    uint64
	e      entry
	recvAt int64 // when e.stamp last advanced (mono)
}

// key is one key's state.
type key struct {
	hash  uint64
	own   entry   // this node's entry; stamp is 0 until the key is used here
	local *use    // this node's use of the key; nil if only peers use it
	peers []count // sorted by peer id, so that a merge finds its sender's entries by binary search
	sent  int64   // when own was last queued for sending (mono)
	born  int64   // when the table first held the key (mono): the cold start's clock (see unclaimed)
	dirty bool    // own changed since it was last queued
}

// use is this node's state for a key it syncs.
type use struct {
	limit      fleet.Limit
	level      float64 // token bucket: the fleet's bucket as this node reconstructs it
	levelAt    int64
	meter      float64 // token bucket: this node's share of the bucket
	meterAt    int64
	lease      uint64 // the last lease granted
	leaseEpoch uint64 // the window it was granted in
	usedAt     int64  // the last sync (mono)
	sentAt     int64  // when own.demand was last set (mono)
}

// table is not safe for concurrent use; Gossip guards it with a mutex.
type table struct {
	self     *peer
	peers    map[string]*peer
	keys     map[uint64]*key
	maxKeys  int
	maxPeers int
	// entries and maxEntries are the peers' entries held, over every
	// key, and the bound on them: see maxEntries in merge.go.
	entries, maxEntries int
	grace               int64
	forget              int64 // how long a gone peer is remembered

	scratch []float64
	downs   []int64 // view's scratch
	changed []*key  // own keys synced since they were last flushed
	dropped uint64  // entries refused: table full, or unknown peer beyond maxPeers
	lastID  uint64  // the last peer.id given
	members int     // peers alive and not left, this node among them (mark)
}

func newTable(self string, inc uint64, cfg *Config) *table {
	p := &peer{name: self, inc: inc, alive: true}
	return &table{
		self:       p,
		peers:      map[string]*peer{self: p},
		keys:       make(map[uint64]*key),
		maxKeys:    cfg.MaxKeys,
		maxPeers:   cfg.MaxPeers,
		maxEntries: maxEntries,
		members:    1,
		grace:      int64(cfg.Grace),
		forget:     int64(10 * cfg.Grace),
	}
}

// ms is the wall time in Unix milliseconds, 0 before 1970.
func (i instant) ms() uint64 { return uint64(max(i.wall, 0)) / uint64(time.Millisecond) }

// epochOf is the window wall falls in, for a window of ms milliseconds,
// and how far into it wall is, in [0, 1).
func epochOf(wall int64, ms uint64) (uint64, float64) {
	if ms == 0 {
		return 0, 0 // no entry has a zero window (decode refuses one); no division by it either
	}
	t := uint64(max(wall, 0)) / uint64(time.Millisecond)
	return t / ms, float64(t%ms) / float64(ms)
}

// roll moves e forward to window ep, keeping what it counted in ep-1.
func (e *entry) roll(ep uint64) {
	if e.epoch >= ep {
		return
	}
	e.cur, e.prev, e.epoch = e.countAt(ep), e.countAt(ep-1), ep
}

// estimate is a sliding window's count over the last window: all of
// window ep and the part of ep-1 still inside it.
func (e *entry) estimate(ep uint64, frac float64) float64 {
	return float64(e.countAt(ep)) + float64(e.countAt(ep-1))*(1-frac)
}

// peerFor returns the peer named name, remembering it if it is new and
// there is room.
func (t *table) peerFor(name []byte) *peer {
	if p, ok := t.peers[string(name)]; ok {
		return p
	}
	if len(t.peers) > t.maxPeers {
		return nil
	}
	t.lastID++
	p := &peer{id: t.lastID, name: string(name)}
	t.peers[p.name] = p
	return p
}

// keyFor returns the key hashed h, creating it if there is room or
// force is set (this node's own keys are always tracked).
func (t *table) keyFor(h uint64, force bool, now instant) *key {
	if k, ok := t.keys[h]; ok {
		return k
	}
	if !force && len(t.keys) >= t.maxKeys {
		return nil
	}
	k := &key{hash: h, born: now.mono}
	t.keys[h] = k
	return k
}

// fleetView is what this node sees of its fleet: the live members (this
// node included), the members known (also those gone without leaving
// within the forget horizon), and how long it has been on the minority
// side of a split: hearing from no more than half of the fleet it knows;
// zero while it hears from a majority. The minority began when the peer
// that tipped it went down.
type fleetView struct {
	live, known int
	split       time.Duration
}

// alone reports whether this node is cut off from a fleet it expects: no
// peer is alive, but some peer that did not leave gracefully was seen
// within the forget horizon.
func (v fleetView) alone() bool { return v.live == 1 && v.known > 1 }

// view is the fleet as this node sees it now, in one pass over the peers.
func (t *table) view(now instant) fleetView {
	live, known := 1, 1
	down := t.downs[:0]
	for _, p := range t.peers {
		switch {
		case p == t.self || p.left:
		case p.alive:
			known++
			live++
		case p.downAt != 0 && now.mono-p.downAt <= t.forget:
			known++
			down = append(down, p.downAt)
		}
	}
	t.downs = down
	if 2*live > known {
		return fleetView{live, known, 0}
	}
	slices.Sort(down)
	tipped := down[(known+1)/2-1]
	return fleetView{live, known, time.Duration(max(1, now.mono-tipped))}
}

// standing is how a peer's entry counts toward a key's shares.
type standing int

const (
	gone   standing = iota // left, idle, dropped the key, or silent past the grace
	live                   // current: split the budget by its demand
	silent                 // not heard from lately: its last weight stays reserved
)

func (t *table) standingOf(c *count, now instant) standing {
	if c.p.left || (c.e.demand == 0 && c.e.reserved == 0) {
		return gone
	}
	age := now.mono - c.recvAt
	stale := max(int64(staleAfter), int64(c.e.ttlMs)*int64(time.Millisecond)*3/2)
	switch {
	case age <= stale:
		return live
	case c.p.alive && now.mono-c.p.heard <= stale:
		return gone // it is talking, just not about this key
	case age <= t.grace:
		return silent
	}
	return gone
}

// leaseStands reports whether c's lease is still outstanding.
func leaseStands(c *count, now instant) bool {
	return !c.p.left && c.e.reserved > 0 && now.mono-c.recvAt <= int64(c.e.ttlMs)*int64(time.Millisecond)
}

// pending calls f with this node's entries that changed since they were
// last sent, and those in use that were last sent longer than refresh
// ago: a peer that missed an update, or joined since, learns it, and
// peers can tell this node is alive.
func (t *table) pending(now instant, f func(k *key)) {
	clear(t.changed) // every changed key is seen below
	t.changed = t.changed[:0]
	for _, k := range t.keys {
		if k.local == nil || k.own.stamp == 0 {
			continue
		}
		if k.dirty || now.mono-k.sent >= int64(refresh) && t.inUse(k, now) {
			k.sent, k.dirty = now.mono, false
			f(k)
		}
	}
}

// flushChanged calls f with this node's entries synced since they were
// last sent: a sync's news, without a walk of the whole table.
func (t *table) flushChanged(now instant, f func(k *key)) {
	for _, k := range t.changed {
		if k.dirty && t.keys[k.hash] == k {
			k.sent, k.dirty = now.mono, false
			f(k)
		}
	}
	clear(t.changed)
	t.changed = t.changed[:0]
}

// inUse reports whether this node has counted k and synced it within the
// grace period: its entry is still news to peers.
func (t *table) inUse(k *key, now instant) bool {
	return k.own.stamp != 0 && k.local != nil && now.mono-k.local.usedAt <= t.grace
}

// gc forgets what can no longer matter: keys nobody has counted in the
// last two windows and nobody holds a lease or share on, and peers gone
// for longer than the forget horizon.
func (t *table) gc(now instant) {
	for h, k := range t.keys {
		if u := k.local; u != nil && now.mono-u.usedAt <= max(int64(2*u.limit.Window), t.grace) {
			continue
		}
		keep := k.peers[:0]
		for _, c := range k.peers {
			ep, _ := epochOf(now.wall, c.e.windowMs)
			if c.e.epoch+1 >= ep || leaseStands(&c, now) || t.standingOf(&c, now) != gone {
				keep = append(keep, c)
			} else {
				c.p.counts--
				t.entries--
			}
		}
		clear(k.peers[len(keep):])
		k.peers = keep
		if len(keep) == 0 {
			if k.own.stamp != 0 {
				ep, _ := epochOf(now.wall, k.own.windowMs)
				if k.own.epoch+1 >= ep {
					continue
				}
			}
			delete(t.keys, h)
		}
	}
	for name, p := range t.peers {
		if p != t.self && !p.alive && p.counts == 0 && now.mono-p.downAt > t.forget {
			delete(t.peers, name)
		}
	}
}

// snapshot encodes every entry that still matters, this node's first, at
// most max of them, as a state message into w; nil if there is none.
func (t *table) snapshot(w *encoder, max int, now instant) []byte {
	type origin struct {
		p   *peer
		inc uint64
	}
	groups := map[origin][]*entry{}
	order := []origin{{t.self, t.self.inc}}
	n := 0
	for _, k := range t.keys {
		if n < max && k.own.stamp != 0 && t.matters(&k.own, now) {
			groups[order[0]] = append(groups[order[0]], &k.own)
			n++
		}
	}
	for _, k := range t.keys {
		for i := range k.peers {
			c := &k.peers[i]
			if n >= max {
				break
			}
			if c.p.left || !(t.matters(&c.e, now) || leaseStands(c, now) || t.standingOf(c, now) != gone) {
				continue
			}
			o := origin{c.p, c.inc}
			if _, ok := groups[o]; !ok {
				order = append(order, o)
			}
			groups[o] = append(groups[o], &c.e)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	// The origins in a fixed order, not the map's: a receiver lists a
	// key's peers in the order it merges them, and sums their shares in
	// that order, so the simulator, which runs this, repeats itself.
	slices.SortFunc(order[1:], func(a, b origin) int {
		return cmp.Or(strings.Compare(a.p.name, b.p.name), cmp.Compare(a.inc, b.inc))
	})
	w.header(kindState)
	for _, o := range order {
		if len(groups[o]) == 0 {
			continue
		}
		w.section(o.p.name, o.inc)
		for _, e := range groups[o] {
			w.entry(e)
		}
	}
	return w.finish()
}

// matters reports whether e counts anything in the current or previous
// window.
func (t *table) matters(e *entry, now instant) bool {
	ep, _ := epochOf(now.wall, e.windowMs)
	return e.epoch+1 >= ep
}
