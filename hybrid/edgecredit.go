package hybrid

import (
	"math"
	"runtime"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// A sliding window's lease lapses at its window's edge (leaseEdge), and
// until its next grant the key holds nothing: its first request past the
// edge was refused, and asked for an early sync. A key far under its
// limit hears from the fleet every round, so that was one refusal a key
// a window, for nothing: in the simulator's zipf with sliding windows
// (1,000 keys, none above 30% of its limit) 3.2% of all requests on 8
// nodes, 3.4% on one, growing with the interval, where the ideal refuses
// none.
//
// So a grant that leaves the fleet well under the limit also lends the
// key an edge credit. The first decision past the edge (crossEdge) makes
// it the word's allowance, spendable until the next window's edge, marks
// the word's spent then, and asks for an early sync; what is left of the
// lapsed lease goes back to the fleet at the next sync, as before. That sync reports what was spent up to the crossing only,
// and takes its marks from there: what the key spent on the credit comes
// out of the lease the sync brings, as what a key spends during a round
// trip does (see grant), so the store counts it in the new window, where
// it was spent, once. Counted with the lapsed lease instead (reported as
// spent from it), it weighed in the window that ended: in the simulator's
// bursts, which start at a window's edge, the fleet's windows ran 3.2% of
// the limit over the ideal's.
//
// The credit is never more than what the key would spend until the
// early sync's grant (its low-water mark: a round trip and an early-sync
// gap of its forecast, a quarter of its lease at least), nor than the node's equal part of what the grant left free
// beyond a quarter of the limit. The new window starts with at least that
// much free but for what other nodes lease meanwhile: only a window that
// fills from there before the early sync's grant (which then comes short
// of what the credit spent) admits the difference past the limit, and
// the next report counts it.

// crossedBit marks leasePace.edge as crossed; the low 32 bits then hold
// the word's spent at the crossing.
const crossedBit = 1 << 63

// edgeCredit is what k may spend past its lease's edge, given a grant g
// of whole: nothing unless g left the fleet more than a quarter of the
// limit free. Sync loop only.
func (l *Limiter) edgeCredit(k *keyState, whole int64, g *fleet.Grant) int64 {
	far := g.Remaining - k.policy().capacity/4
	if whole <= 0 || far <= 0 {
		return 0
	}
	return max(0, min(l.lowWater(k, whole), far/int64(max(1, g.Nodes))))
}

// crossEdge lends k, whose lease lapsed at its window's edge by now, its
// edge credit (see above), at most once a grant: the word's allowance
// becomes the credit, spendable until the next edge, and the pace ends.
// It reports whether it did, so that the decision is taken again. It
// holds the pace's seq for a few stores, as the sync loop does to install
// a grant, so that the two never mix.
func (k *keyState) crossEdge(now int64) bool {
	p := &k.pace
	for range pacedTries {
		s := p.seq.Load()
		if e := p.edge.Load(); e == 0 || e&crossedBit != 0 {
			return false
		}
		if s&1 != 0 || !p.seq.CompareAndSwap(s, s+1) {
			runtime.Gosched() // a grant, or another decision crossing: a few stores away
			continue
		}
		c, u := p.edge.Load(), k.until.Load()
		ok := c != 0 && c&crossedBit == 0 && now >= u
		if ok {
			p.end.Store(0)
			p.rate.Store(0)
			for {
				w := k.word.Load()
				if k.word.CompareAndSwap(w, w&^math.MaxUint32|c) {
					p.edge.Store(crossedBit | uint64(spentOf(w)))
					break
				}
			}
			k.until.Store(u + int64(k.policy().limit.Window))
		}
		p.unlock()
		return ok
	}
	return false
}

// crossed reports whether the key crossed its edge since its last grant.
func (p *leasePace) crossed() bool { return p.edge.Load()&crossedBit != 0 }

// crossedAt moves m, a sync's marks of k, back to k's edge crossing, if
// k crossed since its last grant and m was read after: the sync then
// reports what k spent until the crossing, and its grant takes what k
// spent since from the lease (see above). A crossing that came after the
// marks is left to the grant, whose lease it comes out of all the same.
// Sync loop only.
func (k *keyState) crossedAt(m *mark, fleets int) {
	e := k.pace.edge.Load()
	if e&crossedBit == 0 || k.stripes.Load() != nil {
		return
	}
	raw := uint32(e) + k.folded
	back := int64(int32(m.raw - raw))
	if back < 0 {
		return
	}
	for i := range fleets {
		if m.s0-back < k.reported[i] {
			return // reported past the crossing already: keep the marks
		}
	}
	m.s0 -= back
	m.raw = raw
}
