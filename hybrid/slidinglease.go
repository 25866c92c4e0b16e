package hybrid

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// A sliding window's lease is counted in the window it is granted in: it
// lapses at that window's edge (leaseEdge), and it is paced.
//
// A paced lease: a sliding window's previous window weighs less as the
// window slides, so what the fleet may admit grows with time. A lease
// sized to the estimate at the sync alone misses what frees between the
// node's last sync before the window's edge and the edge, where the lease
// lapses (see leaseEdge): one node alone admitted about 94% of an ideal
// limiter (sim TestOneNodeIsIdeal; real Redis the same in
// TestFleetAccuracy). So the store also leases ahead what frees until
// the node's next sync (fleet.Grant.Paced), counted in the window at
// once, and the node releases it evenly over Grant.PacedFor: at every
// moment the node has spent at most what the window's estimate lets the
// fleet admit then.
//
// The word's allowance holds the whole grant, the paced part included;
// what is not released yet is hidden from it:
//
//	hidden(t) = ceil(rate × (end - t)) while t < end, else 0
//
// and a take succeeds if allowance - hidden(t) holds it. What was spent
// during the sync's round trip thus comes out of the lease first, then out
// of what the pace releases, and a Cancel's give-back (which grows the
// allowance) is spendable at once.
//
// The pace (end, rate) and the word are two atomics, installed together
// by the sync loop: a take must not match one grant's word with another
// grant's pace (an old pace nearly spent over a new word would release
// the new pace at once). leasePace.seq orders them like a seqlock that never
// waits: the sync loop makes it odd, installs the word and the pace, and
// makes it even again; a take reads it before and after its
// compare-and-swap, and if a grant ran in between (or was running) it
// refunds what it took and tries again, at most a few times, then counts
// as short. So the hot path stays one compare-and-swap, no lock, no
// allocation.
//
// The refund goes to the key's count (keyState.extra), not back into the
// allowance. A give would be exact for the fleet's count but not for the
// word: the grant that ran may have counted the take as spent before the
// new allowance was set (the take came before the sync's mark), and the
// give then raises the new grant's allowance by what the take held, which
// another take spends at once, past the pace (TestPacedTakesRaceGrants: a
// take of 500 admitted beside grants that never release more than 10). A
// refund cannot: the fleet is told the tokens were not spent (the next
// report is that much smaller), and the node does without them until its
// next grant. A take races a grant once per sync at most, for a few
// nanoseconds, so what this refuses is nothing a user sees.

// leasePace is a key's paced release and its edge credit, in keyState.
type leasePace struct {
	seq  atomic.Uint64 // odd while the sync loop installs a grant, or a decision crosses the edge
	end  atomic.Int64  // when the last paced token is released; 0 for no pace
	rate atomic.Uint64 // tokens released per ns, as float64 bits
	edge atomic.Uint64 // the edge credit (see crossEdge): what the key may spend past its lease's edge, or crossedBit | the word's spent when it did; 0 for none
}

// lock makes seq odd, once no decision holds it (crossEdge holds it for
// a few stores, never across a call). Sync loop only.
func (p *leasePace) lock() {
	for {
		if s := p.seq.Load(); s&1 == 0 && p.seq.CompareAndSwap(s, s+1) {
			return
		}
		runtime.Gosched()
	}
}

// unlock makes seq even again.
func (p *leasePace) unlock() { p.seq.Add(1) }

// pacedTries is how many times a take is tried while grants race it.
const pacedTries = 4

// hidden is what of the allowance the pace has not released by now. Its
// fields must be read between two equal, even loads of seq.
func (p *leasePace) hidden(now int64) int64 {
	end := p.end.Load()
	if now >= end {
		return 0
	}
	return int64(math.Ceil(math.Float64frombits(p.rate.Load()) * float64(end-now)))
}

// pacing reports whether some of the allowance is still paced at now: a
// refusal then waits for the pace, not for a sync. A hint only: it does not
// read under seq.
func (p *leasePace) pacing(now int64) bool { return now < p.end.Load() }

// next is how long until the pace releases one more token at now; 0 if it
// is not pacing.
func (p *leasePace) next(now int64) time.Duration {
	r := math.Float64frombits(p.rate.Load())
	if now >= p.end.Load() || r <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(1 / r))
}

// takePaced admits n from k's word if what the pace has released of its
// allowance holds n. left is what is released and left after it; unpaced
// is all the allowance left, released or not, which the low-water mark
// is checked against (a lease that paces its tokens out is not running
// low).
func (k *keyState) takePaced(now, n int64) (left, unpaced int64, ok bool) {
	p := &k.pace
	for range pacedTries {
		s := p.seq.Load()
		if s&1 != 0 {
			continue // a grant is being installed
		}
		hidden := p.hidden(now)
		for {
			v := k.word.Load()
			a := allowanceOf(v)
			if a-hidden < n {
				if p.seq.Load() != s {
					break // the pace read may not be this word's
				}
				return max(0, a-hidden), a, false
			}
			if !k.word.CompareAndSwap(v, v-uint64(n)+uint64(n)<<32) {
				continue
			}
			if p.seq.Load() == s {
				return a - hidden - n, a - n, true
			}
			k.extra.Add(-n) // a grant ran: the pace may not be this word's (see above)
			break
		}
	}
	return 0, 0, false
}

// grantPaced installs a grant of lease, and paced released over pacedFor
// from now, spendable until until, and the credit past it, under the
// pace's seq (see above): a decision crossing the edge (crossEdge) sees
// all of one grant or all of the next. Sync loop only.
func (k *keyState) grantPaced(raw uint32, lease, paced int64, pacedFor time.Duration, now, low, until, credit int64) {
	p := &k.pace
	p.lock()
	k.grant(raw, lease+paced, low)
	if paced > 0 && pacedFor > 0 {
		p.rate.Store(math.Float64bits(float64(paced) / float64(pacedFor)))
		p.end.Store(now + int64(pacedFor))
	} else {
		p.end.Store(0)
		p.rate.Store(0)
	}
	k.until.Store(until)
	p.edge.Store(uint64(max(0, min(credit, maxAllowance))))
	p.unlock()
}

// paced reports whether k's grants may be paced: a Hybrid sliding window
// whose lease is in its one word (a striped key shares its lease out over
// stripes, and a key leased from shards sums several stores' grants;
// both take unpaced leases).
func (k *keyState) paced() bool {
	return k.policy().limit.Algorithm == local.SlidingWindow && k.stripes.Load() == nil && k.leaseShards() == nil
}

// endPace drops from k's word what its pace has not released by now, and
// ends the pace: before the word's allowance is shared out over stripes,
// which take unpaced. Sync loop only.
func (k *keyState) endPace(now int64) {
	p := &k.pace
	if p.end.Load() == 0 && (p.edge.Load() == 0 || p.crossed()) {
		return
	}
	p.lock()
	if !p.crossed() {
		p.edge.Store(0) // a crossing's mark stays for the next sync's marks (crossedAt)
	}
	hidden := p.hidden(now)
	for {
		v := k.word.Load()
		a := max(0, allowanceOf(v)-hidden)
		if k.word.CompareAndSwap(v, v&^math.MaxUint32|uint64(a)) {
			break
		}
	}
	p.end.Store(0)
	p.rate.Store(0)
	p.unlock()
}

// pacedOf is what of g's paced part k takes beside a lease of lease: none
// when k cannot pace (it did not ask, or is striped since), or when the
// ladder cuts the lease (cut) or the node is closing; never more than a
// word holds.
func (k *keyState) pacedOf(g *fleet.Grant, lease int64, cut bool) int64 {
	if cut || !k.policy().paced || k.stripes.Load() != nil || g.PacedFor <= 0 {
		return 0
	}
	return max(0, min(g.Paced, maxAllowance-lease))
}

// leaseEdge is when a lease stops being spendable. A sliding window's lease
// is counted in the window it was granted in, so spending it after that
// window ends would count nowhere: it lapses at the edge, and what is left
// goes back to the fleet at the next sync. The script's ResetAfter is two
// windows from the current one's start while that window holds a count,
// which a lease guarantees. It is counted from sent, when the call left
// (the store's clock read it no earlier), so that the lease lapses no
// later than the store's window ends: counted from the reply's arrival,
// a paced lease, spent up to the edge, ran a reply's latency into the
// next window (real Redis under -race: up to 12 over a limit of 1,000 in
// an aligned window). A token bucket's lease has no edge.
func (l *Limiter) leaseEdge(p *policy, sent, lease int64, g *fleet.Grant) int64 {
	if p.limit.Algorithm != local.SlidingWindow || lease == 0 || g.ResetAfter <= 0 {
		return math.MaxInt64
	}
	return sent + int64(g.ResetAfter-p.Window)
}
