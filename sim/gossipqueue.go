package sim

import (
	"cmp"
	"slices"
)

// txQueue is memberlist's TransmitLimitedQueue as a Gossip uses it: one
// named broadcast per key, a newer one replacing the older at zero
// transmissions. Each packet a node sends (a gossip round sends one per
// peer, and probes and acks carry some too) is filled from the queue:
// fewest transmissions first, within a tier the longest message first,
// then the newest; every message that goes into a packet counts one
// transmission, and leaves the queue after limit of them
// (RetransmitMult × ceil(log10(N+1))). So an update is carried to limit
// peers in all, not to GossipNodes peers on each of limit rounds, and
// many keys share a packet's 1,400 bytes.
type txQueue struct {
	tiers  [][]*queued // by transmissions so far; each sorted as memberlist's btree
	byName map[string]*queued
	ids    int64
	n      int
	taken  []*queued // take's, reused
}

// queued is one key's update waiting in the queue.
type queued struct {
	name string
	msg  []byte
	tr   int   // transmissions so far
	id   int64 // order of queueing: newer is larger
	ver  version
}

// version names an update for the coverage figure: its origin, its key
// and its stamp.
type version struct {
	origin int
	key    int // the key's slot in the coverage table, or -1 if untracked
	stamp  uint64
}

func newTxQueue() *txQueue { return &txQueue{byName: map[string]*queued{}} }

// less is memberlist's limitedBroadcast.Less within a tier: longer
// messages first, then newer ones.
func less(a, b *queued) int {
	if c := cmp.Compare(len(b.msg), len(a.msg)); c != 0 {
		return c
	}
	return cmp.Compare(b.id, a.id)
}

func (q *txQueue) insert(it *queued) {
	for len(q.tiers) <= it.tr {
		q.tiers = append(q.tiers, nil)
	}
	t := q.tiers[it.tr]
	i, found := slices.BinarySearchFunc(t, it, less)
	if found {
		// Memberlist's btree holds one item per key (transmissions,
		// length, id), and ids restart when the queue empties: an item
		// equal to one queued replaces it, which is then lost.
		t[i] = it
		return
	}
	q.tiers[it.tr] = slices.Insert(t, i, it)
	q.n++
}

// remove deletes the item with it's key, as the btree does: after a
// replacement above, that may be another.
func (q *txQueue) remove(it *queued) {
	t := q.tiers[it.tr]
	i, ok := slices.BinarySearchFunc(t, it, less)
	if !ok {
		return
	}
	q.tiers[it.tr] = slices.Delete(t, i, i+1)
	q.dec()
}

// dec counts an item out; memberlist restarts its ids when the queue
// empties, even in the middle of a take, which orders equal messages.
func (q *txQueue) dec() {
	if q.n--; q.n == 0 {
		q.ids = 0
	}
}

// put queues an update, replacing one of the same name at once.
func (q *txQueue) put(name string, msg []byte, v version) {
	q.ids++
	it := &queued{name: name, msg: msg, id: q.ids, ver: v}
	if old := q.byName[name]; old != nil {
		q.remove(old)
	}
	q.byName[name] = it
	q.insert(it)
}

// take is GetBroadcasts(overhead, limit): the messages for one packet
// of at most limit bytes, overhead more per message, each counted one
// transmission; those that reach transmits leave the queue. The slice
// is take's until its next call.
func (q *txQueue) take(overhead, limit, transmits int) []*queued {
	q.taken = q.taken[:0]
	if q.n == 0 {
		return nil
	}
	used := 0
	for tr := 0; tr < len(q.tiers); {
		free := limit - used - overhead
		if free <= 0 {
			break
		}
		t := q.tiers[tr]
		// The first of the tier (longest first) that fits.
		i, _ := slices.BinarySearchFunc(t, free, func(it *queued, free int) int { return cmp.Compare(free, len(it.msg)) })
		if i == len(t) {
			tr++
			continue
		}
		it := t[i]
		q.tiers[tr] = slices.Delete(t, i, i+1)
		q.dec()
		used += overhead + len(it.msg)
		q.taken = append(q.taken, it)
	}
	for _, it := range q.taken {
		if it.tr+1 >= transmits {
			delete(q.byName, it.name)
			continue
		}
		it.tr++
		q.insert(it)
	}
	return q.taken
}
