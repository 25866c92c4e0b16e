package sim

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/gossip"
)

// How the simulated gossip network learns of membership changes:
// memberlist declares a silent member dead after its probes and suspicion
// (on the gossip package's defaults a minority of 2 in 6 noticed a split
// after 3.4-4.9 s, TestSplitDetectedOnDefaults; 4 s here), and a Gossip
// finds a lost peer again by re-joining it every RejoinInterval
// (memberlist's own gossip to the dead often finds it sooner; this is the
// bound).
const (
	detectAfter = int64(4 * time.Second)
	rejoinAfter = int64(gossip.DefaultRejoinInterval)
)

// gossipNode is a node's gossip state: the gossip package's Core, the
// updates it still has to send, and the peers it counts as live.
type gossipNode struct {
	core   *gossip.Core
	queue  []*queued
	byName map[string]*queued
	sees   map[int]bool
	rounds int
}

// queued is an update waiting for its remaining transmissions.
type queued struct {
	name string
	msg  []byte
	left int
}

// gossipSyncer is one node's Gossip: Sync is local, and what changed goes
// out on the node's next gossip rounds.
type gossipSyncer struct {
	e *engine
	i int
}

var _ global.Syncer = gossipSyncer{}

func (s gossipSyncer) Sync(_ context.Context, req *global.Request) (*global.Response, error) {
	n := s.e.nodes[s.i]
	now := s.e.clk.Now()
	s.e.m.syncKeys += int64(len(req.Keys))
	resp, err := n.g.core.Sync(req, now)
	if err == nil {
		s.e.enqueue(n, n.g.core.Changed(now)) // as Gossip.Sync queues; refreshes wait for a round
	}
	return resp, err
}

// enqueue queues updates; a newer update for a key replaces the queued
// one, with a fresh count of transmissions, as a Gossip's queue does.
func (e *engine) enqueue(n *node, ups []gossip.Update) {
	if len(ups) == 0 {
		return
	}
	left := gossip.Transmissions(gossip.DefaultRetransmitMult, e.live)
	g := n.g
	for _, u := range ups {
		if q := g.byName[u.Name]; q != nil {
			q.msg, q.left = u.Msg, left
			continue
		}
		q := &queued{name: u.Name, msg: u.Msg, left: left}
		g.byName[u.Name] = q
		g.queue = append(g.queue, q)
	}
}

// gossipJoin gives node i its Core, introduces it to every active node,
// and starts its gossip rounds.
func (e *engine) gossipJoin(i int) error {
	core, err := gossip.NewCore(nodeName(i), uint64(e.now+1), gossip.Config{})
	if err != nil {
		return err
	}
	n := e.nodes[i]
	n.g = &gossipNode{core: core, byName: map[string]*queued{}, sees: map[int]bool{}}
	for j, o := range e.nodes {
		if j == i || !o.active || !e.reaches(i, j) {
			continue
		}
		n.g.sees[j] = true
		core.Join(nodeName(j))
		o.g.sees[i] = true
		o.g.core.Join(nodeName(i))
	}
	first := int64(e.rng.Float64() * float64(e.cfg.GossipInterval))
	e.schedule(&event{at: e.now + first, kind: gossipTick, node: i})
	return nil
}

// gossipLeave sends a leaving node's farewell: its peers free its share
// at once.
func (e *engine) gossipLeave(n *node) {
	bye := n.g.core.Farewell()
	for j, o := range e.nodes {
		if o == n || !o.active || !n.g.sees[j] {
			continue
		}
		at := e.now + int64(e.cfg.GossipDelay)
		e.schedule(&event{at: at, kind: deliver, node: j, msg: bye})
		e.at(at, func() {
			o.g.sees[n.i] = false
			o.g.core.Leave(n.g.core.Name(), e.clk.Now())
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
	e.at(e.now+detectAfter, func() { e.refreshViews(false) })
}

// refreshViews brings every node's member list in line with the network:
// joining the peers it reaches, or forgetting those it does not.
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
			case r && join && !na.g.sees[b]:
				na.g.sees[b] = true
				na.g.core.Join(nodeName(b))
			case !r && !join && na.g.sees[b]:
				na.g.sees[b] = false
				na.g.core.Leave(nodeName(b), now)
			}
		}
	}
}

// gossipRound is one of node i's gossip rounds: it picks GossipFanout of
// the peers it counts as live, at random, and sends each of them every
// queued update, which then has one transmission fewer to go.
func (e *engine) gossipRound(i int) {
	n := e.nodes[i]
	if !n.active {
		return
	}
	e.schedule(&event{at: e.now + int64(e.cfg.GossipInterval), kind: gossipTick, node: i})
	g := n.g
	now := e.clk.Now()
	e.enqueue(n, g.core.Updates(now)) // refreshes due
	if g.rounds++; g.rounds%5 == 0 {
		g.core.Collect(now)
	}
	if len(g.queue) == 0 {
		return
	}
	var peers []int
	for j := range e.nodes {
		if g.sees[j] && e.nodes[j].active {
			peers = append(peers, j)
		}
	}
	for k := 0; k < min(e.cfg.GossipFanout, len(peers)); k++ {
		r := k + e.rng.IntN(len(peers)-k)
		peers[k], peers[r] = peers[r], peers[k]
	}
	peers = peers[:min(e.cfg.GossipFanout, len(peers))]
	keep := g.queue[:0]
	for _, q := range g.queue {
		for _, j := range peers {
			e.m.syncBytes += int64(len(q.msg))
			if !e.reaches(i, j) || e.rng.Float64() < e.cfg.GossipLoss {
				continue
			}
			e.schedule(&event{at: e.now + int64(e.cfg.GossipDelay), kind: deliver, node: j, msg: q.msg})
		}
		if q.left--; q.left > 0 || len(peers) == 0 {
			keep = append(keep, q)
		} else {
			delete(g.byName, q.name)
		}
	}
	clear(g.queue[len(keep):])
	g.queue = keep
}
