package gossip

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
)

// What a Gossip sends and how: a sync's changed keys go out as memberlist
// broadcasts up to what its gossip can carry per interval (UpdateBudget),
// the rest in stream batches to every member.

// budget is UpdateBudget for this node's Config and fleet.
func (g *Gossip) budget(interval time.Duration) int {
	return updateBudget(g.cfg, int(g.nodes.Load()), interval)
}

// updateBudget is how many single-key updates memberlist's gossip can
// carry per sync interval for a node of c (its Name, Label,
// GossipInterval, GossipNodes and RetransmitMult; zero ones mean their
// defaults) in a fleet of nodes: gossip rounds per interval, times
// packets per round, times updates per packet, divided by the
// transmissions each update takes. A Gossip queues at most this many of
// a sync's changed keys for gossip and sends the rest in stream batches
// to every member.
func updateBudget(c Config, nodes int, interval time.Duration) int {
	c.GossipInterval = cmp.Or(c.GossipInterval, defaultGossipInterval)
	c.GossipNodes = cmp.Or(c.GossipNodes, defaultGossipNodes)
	c.RetransmitMult = cmp.Or(c.RetransmitMult, defaultRetransmitMult)
	rounds := max(1, int(interval/c.GossipInterval))
	packet := 1400 - 2 - len(c.Label) - 2 - 64 // header, label, encryption
	per := packet / (updateOverhead + len(c.Name))
	transmits := gossipsim.Transmissions(c.RetransmitMult, nodes)
	return rounds * c.GossipNodes * per / max(1, transmits)
}

// updateOverhead is a single-key update's size less its origin's name,
// with memberlist's framing: header, counts, name length, incarnation,
// a typical entry (small counts take a byte or two each) and 3 bytes of
// compound-message framing.
const updateOverhead = headerLen + 3 + 1 + 10 + 3 + 48 + 3

// flush queues this node's changed entries (and, with all, those due to
// be sent again): as many as gossip can carry through the
// transmit-limited queue, one message per key so that a newer update
// replaces an older one still queued, and the rest as stream batches to
// every member. mu is held.
func (g *Gossip) flush(now instant, interval time.Duration, all bool) {
	budget := g.budget(interval)
	var over batcher
	each := g.core.tab.flushChanged
	if all {
		each = g.core.tab.pending
	}
	each(now, func(k *key) {
		if budget > 0 {
			budget--
			g.queue.QueueBroadcast(&update{name: keyName(k.hash), msg: g.core.encode(k)})
			g.stats.queued.Add(1)
			return
		}
		over.add(g.core, &k.own)
	})
	for _, msg := range over.done() {
		g.post(msg)
	}
}

// batcher packs entries into update messages for streams, starting a
// new message when one reaches maxBatch.
type batcher struct {
	w    encoder
	msgs [][]byte
}

func (b *batcher) add(c *core, e *entry) {
	if len(b.w.b) == 0 {
		b.w.header(kindUpdate)
		b.w.section(c.tab.self.name, c.tab.self.inc)
	}
	b.w.entry(e)
	if len(b.w.b) >= maxBatch {
		b.msgs = append(b.msgs, b.w.finish())
		b.w = encoder{}
	}
}

// done returns the messages, the last one finished.
func (b *batcher) done() [][]byte {
	if len(b.w.b) > 0 {
		b.msgs = append(b.msgs, b.w.finish())
		b.w = encoder{}
	}
	return b.msgs
}

// post hands a stream batch to the sender without waiting; if the sender
// is behind, the batch is dropped (the next refresh carries the counts).
func (g *Gossip) post(msg []byte) {
	select {
	case g.outbox <- msg:
	default:
		g.stats.outboxDropped.Add(1)
	}
}

// keyName names a key's broadcast in the queue.
func keyName(h uint64) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(h >> (8 * i))
	}
	return string(b[:])
}

// update is one key's entry, queued for gossip.
type update struct {
	name string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*update)(nil)

func (u *update) Invalidates(memberlist.Broadcast) bool { return false }
func (u *update) Message() []byte                       { return u.msg }
func (u *update) Finished()                             {}
func (u *update) Name() string                          { return u.name }

// sendLoop sends stream batches to every other live member.
func (g *Gossip) sendLoop(ctx context.Context) {
	defer g.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case msg := <-g.outbox:
			g.sendAll(msg)
		}
	}
}

// sendAll sends msg to every other live member at once, so that a slow
// peer delays nobody else.
func (g *Gossip) sendAll(msg []byte) {
	var wg sync.WaitGroup
	for _, n := range g.peers() {
		wg.Go(func() {
			if err := g.ml.SendReliable(&n, msg); err != nil {
				g.stats.streamFailures.Add(1)
				return
			}
			g.stats.streamed.Add(1)
			g.stats.bytesOut.Add(uint64(len(msg)))
		})
	}
	wg.Wait()
}
