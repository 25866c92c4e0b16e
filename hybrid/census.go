package hybrid

import (
	"context"
	"time"
)

// censusEvery is how many intervals apart a node registers with its
// fleet's census (store.Census).
const censusEvery = 10

// censusHorizon is how long a node that stopped registering still counts:
// three registrations at the node's interval, and at least 30 s, so that
// the nodes of a fleet whose intervals differ all count each other while
// every interval is under 3 s (a node registers every ten of its own).
func (l *Limiter) censusHorizon() time.Duration {
	return max(time.Duration(3*censusEvery)*l.cfg.Interval, 30*time.Second)
}

// countFleet registers this node with the fleet's census every
// censusEvery intervals, and, when no lease of this round told the
// fleet's size (no Hybrid key synced: a node whose keys are all Strict,
// or that has none yet), takes the census's count as the fleet's size,
// never below the most nodes a grant reported nor Config.FleetSize. Every
// node registers, those that lease too, so that a node that learns its
// size from the census counts them. That size is what a Strict key's
// fail-static bucket and a new key's starter credit are shared by: with
// FleetSize left at 1, every node of a Strict-only fleet spent the whole
// limit during an outage (TestStrictFleetSizeCounted: 3 nodes admitted 3
// times the limit). A census that fails changes nothing: the breaker
// hears of the fleet from the syncs and decisions. Sync loop only.
func (l *Limiter) countFleet(ctx context.Context, now int64, leased bool) {
	s := &l.syncs
	if l.census == nil || !l.fleets[0].closed.Load() {
		return
	}
	if s.counted && now-s.censusAt < censusEvery*int64(l.cfg.Interval) || len(l.early) > 0 && !l.cfg.ManualSync {
		return // not due, or keys wait for an early sync (the loop runs them) that the call would hold up: next round
	}
	s.censusAt = now
	// Twice SyncTimeout: a node's first census runs a script Redis has
	// not cached yet, two round trips, and a timeout would close the
	// connection the syncs share. At 50 ms from Redis the census met a
	// 100 ms SyncTimeout, and the syncs that followed, each dialling a
	// new connection (three round trips), timed out in turn for half a
	// second (TestUnderLimitRefusals, bursts at 50 ms alone: 12% of the
	// requests refused, all while Healthy).
	cctx, cancel := context.WithTimeout(ctx, 2*l.cfg.SyncTimeout)
	n, err := l.census.Census(cctx, l.cfg.Node, l.censusHorizon())
	cancel()
	if err != nil {
		return
	}
	// A node's first count is not taken: the nodes of a fleet that start
	// together register one after another, and the first to count would
	// find itself nearly alone and take nearly the whole limit as its
	// share (16 nodes so would hold starters summing to 1 + 1/2 + ... +
	// 1/16, about 3.4 times the burst). By its second, ten intervals on,
	// every node that started with it has registered. (A gossip node's
	// first count is of the members it found while joining.)
	if !leased && s.counted {
		l.nodesHint.Store(max(int64(n), s.leased, int64(l.cfg.FleetSize)))
	}
	s.counted = true
}
