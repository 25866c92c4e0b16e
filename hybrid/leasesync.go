package hybrid

import (
	"context"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// How a sync carries keys whose leases are split into shards: which of
// a key's Redis keys each Usage is for, the top-up from the next shard,
// and how the shards' grants fold into one (see leaseShards).

// handover is how k's next report to the key itself, after a merge,
// differs from what was spent: only what was spent beyond held, the
// leases the key's charge counted.
type handover struct {
	pending bool
	held    int64
}

// usage is which of a key's Redis keys a Usage of a sync is for.
type usage int

const (
	keyItself  usage = iota // the key's own lease state
	homeShard               // its home shard: report and lease
	settleNext              // the next shard: report, hand the lease back
	topUpNext               // the next shard: lease what the home shard did not grant
)

// target is what one Usage of a sync with sharded leases is for: which
// of batch[j]'s Redis keys.
type target struct {
	j  int
	to usage
}

// callLeases syncs batch with Config.Syncer, which leases shards: a
// sharded key leases from its home shard, and in a second round trip
// from the next shard when the home shard granted less than it asked; a
// key the fleet split since this node last heard is told so by its own
// lease script and moves to its shards, in the same sync. The grants are
// folded into one per key. syncMu is held.
func (l *Limiter) callLeases(ctx context.Context, f *link, batch []*keyState, marks []mark) (*fleet.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, f.syncTimeout(l.cfg.SyncTimeout))
	defer cancel()
	s := &l.syncs
	s.consumed = s.consumed[:0]
	for j, k := range batch {
		s.consumed = append(s.consumed, k.unreported(0, marks[j].s0))
	}
	req := l.request(f)
	sent := l.now()
	tg := s.targets[:0]
	for j, k := range batch {
		if k.leaseShards() != nil {
			tg = l.shardUsages(req, tg, j, k, sent)
			continue
		}
		u := fleet.Usage{Key: k.key, Limit: k.policy().limit, Consumed: s.consumed[j], Demand: k.requested, Paced: k.paced(), Hold: l.holdOf(k, sent)}
		if h := k.handoverOf(); h.pending {
			// What the shards were charged for is not the key's:
			// this report counts as it is, and a new series
			// begins with the next.
			u.Consumed = max(0, u.Consumed-h.held)
			k.series = 0
		} else {
			u.Series, u.Total = k.seriesOf(s.rng, marks[j].s0)
		}
		req.Keys = append(req.Keys, u)
		tg = append(tg, target{j, keyItself})
	}
	s.targets = tg
	resp, err := f.sync(ctx, req)
	if err != nil {
		return nil, err
	}
	out := &fleet.Response{Grants: make([]fleet.Grant, len(batch)), Partitioned: resp.Partitioned}
	again, short := l.applyLeases(batch, out, req, resp, sent)
	for round := 0; round < 2 && len(again)+len(short) > 0; round++ {
		again, short = l.moreLeases(ctx, f, batch, out, again, short)
	}
	for _, j := range again {
		out.Grants[j] = fleet.Grant{Err: errUnsettled}
	}
	return out, nil
}

// mayLease reports whether ls's shards may lease at sent: not once the
// mark may have ended before a lease sent now arrives.
func (l *Limiter) mayLease(ls *leaseShards, sent int64) bool {
	return sent+int64(l.cfg.SyncTimeout) < ls.until
}

// shardUsages adds batch[j]'s usages of its shards to req: its home
// shard's, and the next shard's when it holds a lease there, to settle
// it. What was spent is split between them in proportion to their
// leases.
func (l *Limiter) shardUsages(req *fleet.Request, tg []target, j int, k *keyState, sent int64) []target {
	ls := k.leaseShards()
	c := l.syncs.consumed[j]
	demand := k.requested
	if !l.mayLease(ls, sent) {
		demand = 0 // the mark may end first: hand the leases back
	}
	if ls.fresh {
		c = max(0, c-ls.keyLease)
	}
	home, next := c, int64(0)
	if held := ls.lease[0] + ls.lease[1]; ls.lease[1] > 0 && held > 0 {
		next = mulDiv(c, ls.lease[1], held)
		home = c - next
	}
	next += ls.owed
	req.Keys = append(req.Keys, fleet.Usage{Key: k.key, Shard: ls.keys[ls.home], Limit: ls.limit, Consumed: home, Demand: demand})
	tg = append(tg, target{j, homeShard})
	if ls.lease[1] > 0 || next > 0 {
		req.Keys = append(req.Keys, fleet.Usage{Key: k.key, Shard: ls.keys[ls.next()], Limit: ls.limit, Consumed: next})
		tg = append(tg, target{j, settleNext})
	}
	return tg
}

// moreLeases runs a further round trip: keys just moved to their shards
// report and lease there, and keys whose home shard was short top up
// from the next shard. It returns the keys that still need either.
func (l *Limiter) moreLeases(ctx context.Context, f *link, batch []*keyState, out *fleet.Response, again, short []int) ([]int, []int) {
	s := &l.syncs
	req := l.request(f)
	tg := s.targets[:0]
	sent := l.now()
	for _, j := range again {
		tg = l.shardUsages(req, tg, j, batch[j], sent)
	}
	for _, j := range short {
		k := batch[j]
		ls := k.leaseShards()
		if ls.owed > 0 {
			continue // the next shard still holds an unsettled lease
		}
		// The next shard was settled in the first round trip (or held
		// nothing): this asks only for the rest.
		req.Keys = append(req.Keys, fleet.Usage{Key: k.key, Shard: ls.keys[ls.next()], Limit: ls.limit, Demand: k.requested - ls.lease[0]})
		tg = append(tg, target{j, topUpNext})
	}
	s.targets = tg
	resp, err := f.sync(ctx, req)
	if err != nil {
		return again, nil // no top-up this time; the moved keys report next time
	}
	return l.applyLeases(batch, out, req, resp, sent)
}

// applyLeases installs resp's grants for req, whose usages
// syncs.targets names, into out: one grant per key, the next shard's
// top-up folded into its home shard's. It returns the keys the fleet
// moved to their shards, which must report there, and those whose home
// shard granted less than asked.
func (l *Limiter) applyLeases(batch []*keyState, out *fleet.Response, req *fleet.Request, resp *fleet.Response, sent int64) (again, short []int) {
	for i, t := range l.syncs.targets {
		g, k := resp.Grants[i], batch[t.j]
		ls := k.leaseShards()
		switch t.to {
		case keyItself:
			if g.Shards > 0 {
				k.more().lshards, k.series = l.newLeaseShards(k, g.Shards, sent+int64(g.ShardedFor)), 0
				again = append(again, t.j)
				continue
			}
			out.Grants[t.j] = g
			if g.Err == nil {
				if k.rare != nil {
					k.rare.handover = handover{}
				}
				k.keyLease, k.keyLeaseTo = g.Lease+g.Paced, sent+max(int64(g.TTL), 2*int64(l.cfg.Interval))
			}
		case homeShard:
			out.Grants[t.j] = ls.fold(g)
			if g.Err == nil {
				ls.lease[0], ls.fresh = g.Lease, false
				if k.rare != nil {
					k.rare.handover = handover{}
				}
				if l.wantsTopUp(ls, g.Lease, k.requested, sent) {
					short = append(short, t.j)
				}
			}
		case settleNext:
			ls.settled(g, req.Keys[i].Consumed)
		case topUpNext:
			if g.Err == nil {
				ls.lease[1] = g.Lease
				out.Grants[t.j] = ls.topUp(out.Grants[t.j], g)
				if g.Lease == 0 {
					ls.dry = dryTopUps
				}
			}
		}
	}
	return again, short
}

// settled records the next shard's answer g to a report of consumed: its
// lease is settled, or what it refused is reported again next time.
func (ls *leaseShards) settled(g fleet.Grant, consumed int64) {
	if g.Err != nil {
		ls.owed = consumed
		return
	}
	ls.lease[1], ls.owed = g.Lease, 0
}

// fold turns a home shard's grant into the key's: the lease is the
// node's, the fleet's figures are the shard's times the shard count, an
// estimate of the key's that holds while the shards are evenly used.
func (ls *leaseShards) fold(g fleet.Grant) fleet.Grant {
	if g.Err != nil {
		return g
	}
	n := int64(len(ls.keys))
	g.Used *= n
	g.Remaining *= n
	g.Nodes *= int(n)
	g.Weight /= float64(n)
	return g
}

// topUp adds the next shard's grant t to the key's grant g.
func (ls *leaseShards) topUp(g, t fleet.Grant) fleet.Grant {
	if g.Err != nil {
		return g
	}
	g.Lease += t.Lease
	g.Weight += t.Weight / float64(len(ls.keys))
	g.ResetAfter = max(g.ResetAfter, t.ResetAfter)
	return g
}
