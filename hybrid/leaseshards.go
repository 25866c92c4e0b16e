package hybrid

import (
	"context"
	"errors"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// A Hybrid key costs its Redis master one lease script per node per sync,
// whatever its traffic, and each script reads every node's fields: at
// hundreds of nodes one key's master is the fleet's bottleneck. So a key
// whose fleet-wide sync load reaches Config.HotLeaseSyncs is split into
// min(HotKeyShards, nodes/4) shards (fleet.ShardsOf), each holding its
// part of the limit and spread over the Cluster's masters. Each node
// leases from a home shard, picked by hashing its name with the key, and
// when the home shard grants less than it asked, from the next shard for
// the rest, in a second round trip; it reports its consumption to each in
// proportion to what each had granted. Water-filling runs within each
// shard among its nodes. With a quarter of the nodes per shard, a shard
// no node calls home is rare, and the next shard's top-ups reach it.
//
// The split is the fleet's, through a lease mark in the store
// (store.LeaseShardDirectory.MarkLeaseShards): while it stands, the lease
// scripts of the key itself grant nothing and apply none of a report,
// and answer with the shard count (fleet.Grant.Shards), so that the node
// reports to its shards instead, in the same sync. Nodes leasing from
// the key and nodes leasing from its shards would otherwise each see the
// whole limit.
//
// The mark lasts leaseMarkTTL. A node that still finds the key hot
// extends it when half of that is left (never shortening it, never
// reviving it once ended); every node reads it again in the last two
// intervals and SyncTimeout it knows of, and so hears of an extension
// before it would stop leasing. Nobody leases
// from a shard after the time it last heard the mark ends (less
// SyncTimeout, for a lease still in flight), and a node hears of that
// time before the mark ends in Redis; so once it has ended no shard
// grants another lease. An ended mark still sends every node to the
// shards, with no time left, until a node that finds it ended has
// charged the key with what the shards show spent and ended it
// (EndLeaseShards): a node new to the key cannot lease from the key's
// state as the split froze it.
//
// Reports across the split: a key's leases were counted in what the key
// showed spent, which the node that split it charged the shards with; so
// the first report to a shard is only what the node spent beyond its
// lease from the key. Across the merge, what the shards show spent,
// outstanding leases included, is charged to the key, which forgets the
// leases it held for the nodes at the split (counted then); the first
// report to the key is only what was spent beyond the shard leases.
// Every charge is idempotent (the largest counts), so any number of
// nodes may split or merge a key together.
type leaseShards struct {
	keys     []fleet.Shard // the key's shards in the store
	limit    fleet.Limit   // each shard's: the policy's, divided
	home     int
	until    int64    // when the mark ends, as last heard; never later than in Redis
	lease    [2]int64 // this node's outstanding lease at the home shard and the next
	fresh    bool     // no report yet: the next is only what was spent beyond keyLease
	keyLease int64    // what this node held that the key counted as spent at the split
	owed     int64    // consumption the next shard refused to settle, reported again
	dry      int      // syncs to go before the next shard is asked again, having had nothing to top up with
}

// dryTopUps is how many syncs a node waits before it asks the next shard
// again after a top-up that brought nothing: when the whole key is
// spent, every home shard grants less than asked, and asking the next
// shard every time would triple the scripts for nothing.
const dryTopUps = 4

// wantsTopUp reports whether a home grant of lease, against a demand of
// requested, should be topped up from the next shard at sent.
func (l *Limiter) wantsTopUp(ls *leaseShards, lease, requested, sent int64) bool {
	if lease >= requested || len(ls.keys) < 2 || !l.mayLease(ls, sent) {
		return false
	}
	if ls.dry > 0 {
		ls.dry--
		return false
	}
	return true
}

// leaseMarkIntervals is how long, in intervals, a lease shard mark lasts
// when set or renewed, unless SyncTimeout is long (see leaseMarkTTL).
const leaseMarkIntervals = 20

// leaseMarkTTL is how long a lease shard mark lasts when set or renewed:
// leaseMarkIntervals, and at least four SyncTimeouts, since no node
// leases from a shard in the last SyncTimeout it knows of.
func (l *Limiter) leaseMarkTTL() time.Duration {
	return max(leaseMarkIntervals*l.cfg.Interval, 4*l.cfg.SyncTimeout)
}

// itself is the key itself, as store.LeaseShardDirectory's shards.
var itself = []fleet.Shard{{}}

// errUnsettled marks a grant whose report reached no fleet state: it is
// reported again at the next sync.
var errUnsettled = errors.New("hybrid: the report was not settled")

// newLeaseShards puts k on n lease shards until the mark's end, as heard.
func (l *Limiter) newLeaseShards(k *keyState, n int, until int64) *leaseShards {
	per, _ := splitLimit(k.policy().limit, n)
	home := int((xxh3.HashString(l.cfg.Node) ^ xxh3.HashString(k.key)) % uint64(n))
	counted := int64(0)
	if l.now() <= k.keyLeaseTo {
		// The key's last lease to this node still counts in its state
		// (a lease lasts two intervals, or the node's Hold for a key
		// that rests); an older one has refilled, or lapsed.
		counted = k.keyLease
	}
	if h := k.handoverOf(); h.pending {
		counted = h.held // merged, and split again before a report
	}
	return &leaseShards{keys: fleet.ShardsOf(k.key, n), limit: per, home: home, until: until,
		fresh: true, keyLease: counted}
}

// next is the shard a node tops up from.
func (ls *leaseShards) next() int { return (ls.home + 1) % len(ls.keys) }

// leaseLoad is the fleet's lease syncs per second of k, as this node
// estimates it: the active nodes times its own syncs with demand since
// the last call. Sync loop only.
func (k *keyState) leaseLoad(now int64) (load float64, ok bool) {
	dt := now - k.loadAt
	if k.loadAt == 0 || dt <= 0 {
		k.loadAt, k.syncsSeen = now, k.syncs
		return 0, false
	}
	load = float64(k.nodes) * float64(k.syncs-k.syncsSeen) * 1e9 / float64(dt)
	k.loadAt, k.syncsSeen = now, k.syncs
	return load, true
}

// tendLeaseShards splits the batch's keys whose fleet-wide sync load is
// hot, renews the marks of those still hot, and reads the marks of those
// whose mark is about to end, merging them back if it has. Regular syncs
// only, before the batch is synced.
func (l *Limiter) tendLeaseShards(ctx context.Context, now int64, batch []*keyState) {
	if l.ldir == nil || !l.fleets[0].closed.Load() {
		return
	}
	// All of it within one SyncTimeout, so that a slow store delays the
	// sync by at most that; keys not reached are tended next time.
	ctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
	defer cancel()
	hot := l.cfg.HotLeaseSyncs
	interval := int64(l.cfg.Interval)
	ttl := l.leaseMarkTTL()
	for _, k := range batch {
		load, ok := k.leaseLoad(now)
		ls := k.leaseShards()
		switch {
		case ls == nil:
			if ok && hot > 0 && l.cfg.HotKeyShards > 1 && load >= hot {
				l.splitLeases(ctx, k)
			}
		case ok && hot > 0 && load >= hot/2 && now >= ls.until-int64(ttl)/2:
			// Still hot, with half the mark gone: extend it. A split
			// that has ended is not brought back (the mark says so), but
			// merged, and split anew with its charges.
			sent := l.now()
			rctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
			n, left, err := l.ldir.MarkLeaseShards(rctx, k.key, 0, ttl, k.policy().limit)
			cancel()
			l.heard(ctx, k, n, left, sent, err)
		case now >= ls.until-2*interval-int64(l.cfg.SyncTimeout):
			// Before this node stops leasing from the shards (mayLease),
			// so that it hears of an extension in time.
			sent := l.now()
			mctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
			n, left, err := l.ldir.LeaseShardMark(mctx, k.key)
			cancel()
			l.heard(ctx, k, n, left, sent, err)
		}
	}
}

// heard records what the store said of k's mark, asked at sent: it
// stands for left more, or, if it has ended (or was set again with
// another count since this node last heard), what the shards spent goes
// to the key and the split ends.
func (l *Limiter) heard(ctx context.Context, k *keyState, n int, left time.Duration, sent int64, err error) {
	ls := k.leaseShards()
	switch {
	case err != nil:
	case n == len(ls.keys) && left > 0:
		ls.until = max(ls.until, sent+int64(left))
	case n > 0 && left > 0:
		// Merged and split again with another count while this node
		// was away: its next sync is sent to the new shards, and
		// reports there what it spent beyond its old shard leases.
		r := k.more()
		r.handover = handover{pending: true, held: ls.lease[0] + ls.lease[1]}
		r.lshards, k.series = nil, 0
	default:
		l.mergeLeases(ctx, k)
	}
}

// splitLeases splits k's leases over shards, a quarter as many as its
// nodes (at most HotKeyShards), if that leaves each shard a part worth
// having. The shards are charged with their part of what the key shows
// spent just before the mark, so that the nodes the mark sends there at
// once find no fresh bucket, and again after it, when the key's state
// stands still, with what it finally showed: what the key granted in the
// round trip between is all that leases taken from a shard between the
// mark and the second charge can absorb.
func (l *Limiter) splitLeases(ctx context.Context, k *keyState) {
	n := min(l.cfg.HotKeyShards, int(k.nodes)/4)
	if n < 2 || !divisible(k.policy().limit, n) {
		return
	}
	per, _ := splitLimit(k.policy().limit, n)
	cctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
	defer cancel()
	before, err := l.ldir.LeaseUsed(cctx, k.key, itself, k.policy().limit)
	if err != nil {
		return
	}
	if err := l.ldir.ChargeLeasesAtLeast(cctx, k.key, fleet.ShardsOf(k.key, n), per, before/int64(n), l.cfg.Interval); err != nil {
		return
	}
	sent := l.now()
	m, left, err := l.ldir.MarkLeaseShards(cctx, k.key, n, l.leaseMarkTTL(), k.policy().limit)
	if err != nil || left == 0 {
		return // an ended split awaits its merge: the next sync is sent to it
	}
	if m != n {
		per, _ = splitLimit(k.policy().limit, m)
	}
	if used, err := l.ldir.LeaseUsed(cctx, k.key, itself, k.policy().limit); err == nil {
		_ = l.ldir.ChargeLeasesAtLeast(cctx, k.key, fleet.ShardsOf(k.key, m), per, used/int64(m), l.cfg.Interval)
	}
	k.more().lshards, k.series = l.newLeaseShards(k, m, sent+int64(left)), 0
}

// mergeLeases takes k off its shards, whose mark is gone: the key itself
// is charged with what they show spent, and forgets the nodes' leases
// from before the split, which it counted then; k's next report to it is
// only what was spent beyond its shard leases, which the charge counted.
func (l *Limiter) mergeLeases(ctx context.Context, k *keyState) {
	ls := k.leaseShards()
	cctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
	defer cancel()
	used, err := l.ldir.LeaseUsed(cctx, k.key, ls.keys, ls.limit)
	if err != nil {
		return // the shards lend nothing now; try again at the next sync
	}
	if err := l.ldir.ChargeLeasesAtLeast(cctx, k.key, itself, k.policy().limit, used, l.cfg.Interval); err != nil {
		return
	}
	if ended, err := l.ldir.EndLeaseShards(cctx, k.key); err != nil || !ended {
		return // extended meanwhile, or not known to be ended: stay
	}
	held := ls.lease[0] + ls.lease[1]
	if ls.fresh {
		held = ls.keyLease // split and merged before a report reached a shard
	}
	r := k.more()
	r.handover = handover{pending: true, held: held}
	r.lshards, k.series = nil, 0
}
