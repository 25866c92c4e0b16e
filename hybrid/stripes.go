package hybrid

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/internal/proc"
)

// A hot key's lease is split over stripes, so that the cores admitting
// its requests do not all fight over one atomic word. The stripes hold
// the allowance, each on cache lines of its own; the key's own word then
// holds none and only counts what is spent outside the lease (degraded
// decisions) or given back, since the key's hot fields share its cache
// line. A request takes from its P's stripe (stripe P id mod count, so
// with at least as many stripes as Ps no two Ps share one) and, when that
// stripe is short, from any other that holds enough, before it counts as
// short of lease: a request for one token is refused only when the whole
// lease is spent. Each sync shares the new allowance out by what each P
// asked for, which gives the stripes of busy Ps what the others did not
// use.
//
// Spent is counted per word; the key's spent is their wrapping sum, plus
// what stripes merged back had spent (keyState.folded). Allowance moves
// between words only in the sync loop, when the key is split, granted or
// merged back, and a request's take is one compare-and-swap on one word,
// so allowance never appears or vanishes: neither costs a burst nor a
// loss.
type stripeSet struct {
	s    []stripe // the stripes
	s0   []uint32 // the sync loop's marks: spent of each word, 0 being the key's
	now  []uint32 // the sync loop's scratch for grantStriped, as s0
	prev []uint32 // spent of each word at the last grant, as s0

	credit, creditPrev []int64 // each stripe's credit now and at the last grant
}

type stripe struct {
	word atomic.Uint64
	low  atomic.Int64 // allowance below which this stripe asks for an early sync; 0 for none
	rest atomic.Int64 // what the other stripes were given at the last grant
	// credit is what this stripe's P took from other stripes, less what
	// other Ps took from this one: spending counts where it was taken,
	// and credit moves the demand to the P that made it, for the grant.
	credit atomic.Int64
	_      [96]byte // stripes 128 bytes apart never share a cache line
}

// count is how many stripes hold the key's allowance.
func (set *stripeSet) count() int { return len(set.s) }

// wordAt is word i: the key's own for 0, stripe i-1's after.
func (k *keyState) wordAt(set *stripeSet, i int) *atomic.Uint64 {
	if i == 0 {
		return &k.word
	}
	return &set.s[i-1].word
}

// takeWord admits n from w's allowance if it holds n.
func takeWord(w *atomic.Uint64, n int64) (left int64, ok bool) {
	for {
		v := w.Load()
		a := allowanceOf(v)
		if a < n {
			return a, false
		}
		if w.CompareAndSwap(v, v-uint64(n)+uint64(n)<<32) {
			return a - n, true
		}
	}
}

// takeStriped takes n from this P's stripe or, when that is short, from
// the first other stripe that holds n, so striping refuses a request only
// when no single word of the lease holds it (a request for n > 1 can thus
// be refused while the stripes together hold n: see docs/hotkeys.md).
// Every take is one compare-and-swap on one word, so neither a grant nor
// a merge running at the same time can make or lose allowance. A take
// from another stripe is credited to this P's stripe and debited from the
// lender's, so that the next grant gives the allowance to the P that
// wanted it: weighting by spending alone would give the lender more, and
// one stripe would end up serving every P.
//
// left estimates the key's whole allowance: the stripe's, plus what the
// others were given at the last grant. early reports that the stripe has
// run below its part of the key's low-water mark, which is when the key
// asks for an early sync; each stripe watches its own part, so a P whose
// stripe holds most of the lease asks in time, and one that holds little
// does not ask too soon.
func (k *keyState) takeStriped(set *stripeSet, n int64) (left int64, ok, early bool) {
	c := uint32(len(set.s))
	i := uint32(proc.ID()) % c
	home := &set.s[i]
	if left, ok = takeWord(&home.word, n); ok {
		return left + home.rest.Load(), true, left < home.low.Load()
	}
	for j := uint32(1); j < c; j++ {
		lender := &set.s[(i+j)%c]
		if _, ok = takeWord(&lender.word, n); ok {
			home.credit.Add(n)
			lender.credit.Add(-n)
			return home.rest.Load(), true, true
		}
	}
	// The key's own word holds what was given back since the last grant,
	// and, for a moment at the split, all the allowance.
	if left, ok = takeWord(&k.word, n); ok {
		return left, true, true
	}
	return k.allowance(), false, false
}

// spent is what the node has spent on the key, in full: every stripe's,
// what merged stripes had spent, and what it admitted outside the lease.
// Sync loop only.
func (k *keyState) spent() int64 {
	s := spentOf(k.word.Load()) + k.folded
	if set := k.stripes.Load(); set != nil {
		for i := range set.s {
			s += spentOf(set.s[i].word.Load())
		}
	}
	return k.extend(s) + k.extra.Load()
}

// allowance is what the node may still spend on the key, all stripes.
func (k *keyState) allowance() int64 {
	a := allowanceOf(k.word.Load())
	if set := k.stripes.Load(); set != nil {
		for i := range set.s {
			a += allowanceOf(set.s[i].word.Load())
		}
	}
	return a
}

// markSpent reads the key's spent for a sync, and each stripe's, from the
// same loads, and extends it to 64 bits: it returns spent in full and the
// words' sum as wrapped, which grant takes. Sync loop only.
func (k *keyState) markSpent() (spent int64, raw uint32) {
	extra := k.extra.Load()
	if set := k.stripes.Load(); set == nil {
		raw = spentOf(k.word.Load()) + k.folded
	} else {
		raw = k.folded
		for i := range set.s0 {
			s := spentOf(k.wordAt(set, i).Load())
			set.s0[i] = s
			raw += s
		}
	}
	k.total, k.wordSeen = k.extend(raw), raw
	return k.total + extra, raw
}

// grantStriped installs a lease over the stripes: what the key has spent
// since the marks comes off it, and the rest is shared out in proportion
// to what each stripe spent since the last grant (plus one, so that an
// idle stripe keeps a little): the stripes of the Ps that admit the key
// get what the others did not use. A stripe that spends between the two
// passes pays for it from its own part. Each stripe's low-water mark is
// its part of low, the key's.
func (k *keyState) grantStriped(set *stripeSet, lease, low int64) {
	// What was given back goes with the new lease; drained first, so that
	// nothing is spent from it that the lease below does not count.
	drain(&k.word)
	words := len(set.s0)
	now := set.now
	spent, weight := int64(0), int64(0)
	for i := range words {
		now[i] = spentOf(k.wordAt(set, i).Load())
		spent += int64(int32(now[i] - set.s0[i])) // below 0 if a Cancel gave back
	}
	for i := range set.s {
		set.credit[i] = set.s[i].credit.Load()
		weight += k.demandOf(set, i)
	}
	total := max(0, lease-spent)
	given := int64(0)
	for i := 1; i < words; i++ {
		target := mulDiv(total, k.demandOf(set, i-1), weight)
		if i == words-1 {
			target = total - given // the rounding goes to the last
		}
		given += target
		st := &set.s[i-1]
		st.low.Store(0)
		if total > 0 {
			st.low.Store(mulDiv(low, target, total))
		}
		st.rest.Store(total - target)
		w := &st.word
		for {
			v := w.Load()
			a := max(0, min(target-int64(int32(spentOf(v)-now[i])), maxAllowance))
			if w.CompareAndSwap(v, v&^math.MaxUint32|uint64(a)) {
				break
			}
		}
	}
	copy(set.prev, now)
	copy(set.creditPrev, set.credit)
}

// demandOf is what stripe i's P asked of the lease since the last grant,
// plus one so that an idle stripe keeps a little: what it spent, moved by
// its credit to the P that took it. Sync loop only.
func (k *keyState) demandOf(set *stripeSet, i int) int64 {
	spent := int64(int32(set.now[i+1] - set.prev[i+1]))
	return max(0, spent+set.credit[i]-set.creditPrev[i]) + 1
}

// mulDiv is a×b/c for 0 ≤ a and 0 < b ≤ c, exact where a×b would
// overflow 64 bits.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c)) // hi < c because b ≤ c
	return int64(q)
}

// drain sets w's allowance to zero and returns what it held, and what w
// has spent.
func drain(w *atomic.Uint64) (allowance int64, spent uint32) {
	for {
		v := w.Load()
		if w.CompareAndSwap(v, v&^math.MaxUint32) {
			return allowanceOf(v), spentOf(v)
		}
	}
}

// addAllowance gives w n more to spend.
func addAllowance(w *atomic.Uint64, n int64) {
	for {
		v := w.Load()
		a := min(allowanceOf(v)+n, maxAllowance)
		if w.CompareAndSwap(v, v&^math.MaxUint32|uint64(a)) {
			return
		}
	}
}

// split stripes k over c words, moving its allowance to them evenly.
// Requests that find the stripes still empty take from the key's word
// until it is drained. Sync loop only.
func (k *keyState) split(c int) {
	if c < 2 || k.stripes.Load() != nil {
		return
	}
	set := &stripeSet{s: make([]stripe, c), s0: make([]uint32, c+1), now: make([]uint32, c+1), prev: make([]uint32, c+1),
		credit: make([]int64, c), creditPrev: make([]int64, c)}
	k.stripes.Store(set)
	a, _ := drain(&k.word)
	per, rem := a/int64(c), a%int64(c)
	low := k.low.Load() / int64(c)
	for i := range set.s {
		n := per
		if int64(i) < rem {
			n++
		}
		set.s[i].low.Store(low)
		set.s[i].rest.Store(a - n)
		addAllowance(&set.s[i].word, n)
	}
}

// merge folds k's stripes back into its word: their allowance moves to
// it, and what they spent is kept in k.folded. Sync loop only.
func (k *keyState) merge() {
	set := k.stripes.Swap(nil)
	if set == nil {
		return
	}
	var back int64
	for i := range set.s {
		a, s := drain(&set.s[i].word)
		back += a
		k.folded += s
	}
	addAllowance(&k.word, back)
}

// stripe splits k once its forecast reaches Config.HotKeyRate, and merges
// it back below half of it. Sync loop only.
func (l *Limiter) stripe(k *keyState) {
	hot := l.cfg.HotKeyRate
	switch {
	case hot < 0 || l.cfg.HotKeyStripes < 2:
	case k.stripes.Load() == nil && k.rate >= hot:
		k.endPace(l.now()) // the stripes hold only what is released
		k.split(l.cfg.HotKeyStripes)
	case k.stripes.Load() != nil && k.rate < hot/2:
		k.merge()
	}
}

// HotKey is a key split because of its load: a Hybrid key's lease into
// Stripes on this node, or into lease Shards in Redis (the fleet's sync
// load), or a Strict key into Shards in Redis.
type HotKey struct {
	Key     string
	Stripes int
	Shards  int
	Rate    float64 // requests per second offered to this node, estimated; 0 for a Strict key this node only follows onto shards
}

// HotKeys returns the keys split now, busiest first.
func (l *Limiter) HotKeys() []HotKey {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	var out []HotKey
	l.keys.Range(func(k *keyState) bool {
		set, ls := k.stripes.Load(), k.leaseShards()
		if set == nil && ls == nil {
			return true
		}
		h := HotKey{Key: k.key, Rate: k.rate}
		if set != nil {
			h.Stripes = set.count()
		}
		if ls != nil {
			h.Shards = len(ls.keys)
		}
		out = append(out, h)
		return true
	})
	for _, k := range l.syncs.sharded {
		if set := k.shards.Load(); set != nil {
			rate := 0.0
			if k.rare != nil {
				rate = k.rare.hotRate
			}
			out = append(out, HotKey{Key: k.key, Shards: len(set.keys), Rate: rate})
		}
	}
	slices.SortFunc(out, func(a, b HotKey) int { return cmp.Compare(b.Rate, a.Rate) })
	return out
}
