package hybrid

import (
	"context"
	"time"
)

// censusEvery is how many intervals apart a node that learns its fleet's
// size from no lease asks the fleet for it; a node not heard from for
// three times as long stops counting.
const censusEvery = 10

// countFleet asks the fleet's store how many nodes are live
// (store.Census), when no lease of this round said (no Hybrid key synced:
// a node whose keys are all Strict, or that has none yet), at most every
// censusEvery intervals, and takes the answer as the fleet's size, never
// below Config.FleetSize. That size is what a Strict key's fail-static
// bucket and a new key's starter credit are shared by: with FleetSize
// left at 1, every node of a Strict-only fleet spent the whole limit
// during an outage (TestStrictFleetSizeCounted: 3 nodes admitted 3 times
// the limit). A census that fails changes nothing: the breaker hears of
// the fleet from the syncs and decisions. Sync loop only.
func (l *Limiter) countFleet(ctx context.Context, now int64, leased bool) {
	s := &l.syncs
	if l.census == nil || leased || !l.fleets[0].closed.Load() {
		return
	}
	if s.counted && now-s.censusAt < censusEvery*int64(l.cfg.Interval) {
		return
	}
	s.censusAt = now
	cctx, cancel := context.WithTimeout(ctx, l.cfg.SyncTimeout)
	n, err := l.census.Census(cctx, l.cfg.Node, time.Duration(3*censusEvery)*l.cfg.Interval)
	cancel()
	if err != nil {
		return
	}
	s.counted = true
	l.nodesHint.Store(int64(max(n, l.cfg.FleetSize)))
}
