package hybrid

import (
	"math"
	"sync/atomic"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// A key's lease is one atomic word: the high 32 bits count what the node
// has spent on the key from its lease (wrapping), the low 32 bits hold
// what it may still spend (its allowance). Admitting n is one
// compare-and-swap that takes n from the allowance and adds n to spent.
// An admission that does not come from the lease (a degraded decision) is
// one atomic add to a separate 64-bit count, keyState.extra, which no
// outage, however long, can wrap.
//
// The sync loop reads spent at the start of a sync (s0) and reports what
// was spent since the last report. When the grant L arrives, what was
// spent during the round trip (spent - s0) came out of the old allowance
// but will be reported with the next sync, against the new lease; so the
// new allowance is L - (spent - s0), and nothing is counted twice.
//
// The word's 32-bit spent wraps; the sync loop extends it to 64 bits
// (keyState.extend) at every sync. That is exact while the word moves by
// less than 2^31 between two syncs, and it does: what the word spends
// between syncs came out of one allowance or the next, each at most
// maxAllowance, and what Cancel gives back it had taken. So every cost a
// policy accepts (its capacity is at most maxAllowance) is counted
// exactly, however large.

// maxAllowance is the largest allowance a lease word holds, and so the
// largest capacity (Burst, or Limit for a window) a Hybrid or Strict
// policy takes: 2^31-1.
const maxAllowance = math.MaxInt32

func allowanceOf(w uint64) int64 { return int64(uint32(w)) }
func spentOf(w uint64) uint32    { return uint32(w >> 32) }

// keyRare is the state of a key that few keys need: a hot Hybrid key's
// lease shards, a hot Strict key's rate, an Equal share. It is made the
// first time one of them is (keyState.more), so that the many keys that
// need none do not carry it: at a million keys a node holds a million
// keyStates, and these fields took keyState from Go's size class of 448
// bytes to 480 (issue 21: BenchmarkMemoryPerKey 547.5 to 515.5 bytes a
// key). Sync loop only.
type keyRare struct {
	lshards  *leaseShards // Hybrid: the Redis shards its leases come from; nil if none
	handover handover     // Hybrid: how the next report to the key itself, after a merge, differs
	hotRate  float64      // Strict: the rate the sketch last saw
	share    float64      // Equal shares: tokens the node's share lets it lease
	shareAt  int64        // when share was last refilled
}

// more is k's rare state, made if it has none. Sync loop only.
func (k *keyState) more() *keyRare {
	if k.rare == nil {
		k.rare = &keyRare{}
	}
	return k.rare
}

// leaseShards is the Redis shards k's leases come from; nil if none.
// Sync loop only.
func (k *keyState) leaseShards() *leaseShards {
	if k.rare == nil {
		return nil
	}
	return k.rare.lshards
}

// handoverOf is how k's next report to the key itself differs (see
// handover); none if k has no rare state. Sync loop only.
func (k *keyState) handoverOf() handover {
	if k.rare == nil {
		return handover{}
	}
	return k.rare.handover
}

// keyState is what a Limiter knows of one key. The atomic fields are
// shared with the hot path; the rest belong to the sync loop and are
// touched only under Limiter.syncMu.
type keyState struct {
	// What a decision reads, in the struct's first 64 bytes: at a
	// million keys every cache line a decision touches is a miss, and
	// these were spread over three (a decision cost 3.2 times a plain
	// map lookup, BenchmarkManyKeys); resetAt starts the next line.
	word           atomic.Uint64             // spent<<32 | allowance
	low            atomic.Int64              // allowance below which an early sync is asked for; 0 for none
	until          atomic.Int64              // when the lease stops being spendable: a sliding window's edge; Strict: until when the store is not called (strictCut)
	pol            atomic.Pointer[policy]    // its policy; the sync loop moves it to another on a change (SetPolicies, Invalidate)
	stripes        atomic.Pointer[stripeSet] // a hot key's lease stripes; nil if not striped
	fleetRemaining atomic.Int64              // Grant.Remaining at the last sync
	key            string
	resetAt        atomic.Int64 // when the fleet's bucket is full, on the Limiter's clock

	refused  atomic.Uint64 // requests refused, for the demand forecast
	touched  atomic.Bool   // used since the last sweep (Local and Strict keys)
	early    atomic.Bool   // an early sync has been asked for
	retired  atomic.Bool   // forgotten: callers must look the key up again
	failing  atomic.Bool   // the fleet's last answer for the key was an error: past the lease, the FailMode decides
	hasGrant atomic.Bool   // a grant has been installed: weightBits and fleetRemaining mean something

	// Sync loop state, beside the flags above so that the struct packs
	// (no padding between its small fields).
	listed  bool          // Strict: in syncState.sharded
	capped  bool          // the demand was cut to the node's equal share
	idle    bool          // no request for an IdleTimeout, or leaving
	leaving bool          // its policy is gone or of another kind: handed back and forgotten (see evict)
	hash    uint32        // of key (xxh3, low 32 bits): the rest's wake jitter, and ties in oldest
	floored atomic.Uint32 // 1: its starter credit was the floor, its fleet unknown when it was made; 2: topped up, or granted, since (see topUp)
	walkIdx int32         // its entry in the sync loop's walk (walk.go)
	parked  atomic.Bool   // passed over by the walk until parkAt, offered nothing since its last look: a decision wakes it (walk.go)
	parkAt  int64         // until when it rests without a look (see rests); 0: look

	extra atomic.Int64 // spent outside the lease (degraded admissions), in full
	pace  leasePace    // a sliding window's paced release of its allowance (see slidinglease.go)

	fallback   atomic.Uint64 // sizedBit | the ladder factor's bits the fail-static bucket is sized for; 0 if not sized
	cutFactor  atomic.Uint64 // cutBit | the ladder factor's bits for k alone, cut off while the fleet answers others; 0 if not (see keyCut)
	weightBits atomic.Uint64 // this node's share from the last grant, as float64 bits

	shards atomic.Pointer[shardSet] // a hot Strict key's Redis shards; nil if not sharded

	shardUntil atomic.Int64 // Strict: when the fleet's mark that it is sharded runs out, as last heard

	gen   atomic.Uint32 // the policy table's generation the key was resolved in; 0: resolve it again
	nodes int32         // active nodes, from the last grant (sync loop; beside gen, where a 64-bit field would leave a hole)

	// Sync loop state.
	reported   [2]int64 // spent as of the last report each fleet took
	folded     uint32   // what merged-back stripes spent, wrapping
	wordSeen   uint32   // the words' spent (wrapping) at the last extend
	total      int64    // the words' spent at the last extend, in full
	rare       *keyRare // what few keys need; nil until needed (see keyRare)
	keyLease   int64    // Hybrid: the last lease the key itself (not a shard, not Failover) granted, with its paced part (counted in full)
	keyLeaseTo int64    // when it lapses: granted, plus its TTL or two intervals, whichever is longer
	syncs      int64    // Hybrid: syncs with demand, for the fleet's sync load
	syncsSeen  int64    // syncs at loadAt
	loadAt     int64    // when the sync load was last estimated
	granted    int64    // spent when the last grant was installed
	carry      float64  // the fraction of a token a ladder-capped lease left over
	markIdx    int64    // the Window-long period mark was taken in
	mark       int64    // spent at the first sync of that period
	prevMark   int64    // spent at the first sync of the period before

	spentSeen   int64   // spent as of the last forecast
	refusedSeen uint64  // refused as of the last forecast
	rate        float64 // EWMA of requests offered per second
	forecastAt  int64   // when rate was last updated
	activeAt    int64   // when a request was last offered
	lease       int64   // the last grant
	expires     int64   // when it lapses
	requested   int64   // the demand sent with the last sync
	lastSync    int64   // when the key was last synced
	since       int64   // when its first grant came (see holdOf)
	answeredAt  int64   // when the fleet last answered the key, or it was new
	series      uint64  // Hybrid: the series its reports to the key itself count in (Usage.Series); 0 for a new one
	seriesBase  int64   // spent when the series began
}

// policy is k's policy now. A decision reads it once: the sync loop may
// move the key to the policy that replaced it (see rehome).
func (k *keyState) policy() *policy { return k.pol.Load() }

// seriesOf is k's report series and its Total at spent s0 (see
// fleet.Usage.Series). A series is begun afresh when k has none, or its
// Total would pass 2^52: its number is random, from 1 to
// fleet.MaxLimit, so that a restarted node, or a key forgotten and seen
// again, never continues another's count. The first report of a series
// counts its Consumed as it is. Sync loop only.
func (k *keyState) seriesOf(rng interface{ Uint64N(uint64) uint64 }, s0 int64) (uint64, int64) {
	if k.series == 0 || s0-k.seriesBase > fleet.MaxLimit/2 || s0 < k.seriesBase {
		k.series, k.seriesBase = 1+rng.Uint64N(fleet.MaxLimit), s0
	}
	return k.series, s0 - k.seriesBase
}

// resetFallback forgets k's fail-static bucket once the fleet answers
// again, so that the next outage starts afresh.
func (k *keyState) resetFallback() {
	if k.fallback.Load() != 0 && k.fallback.Swap(0) != 0 {
		k.policy().local.Delete(k.key)
	}
}

// sizedBit marks keyState.fallback as sized; a factor's own sign bit is
// always clear.
const sizedBit = 1 << 63

// unreported is what fleet i has not been told k spent, as of spent s0.
func (k *keyState) unreported(i int, s0 int64) int64 { return max(0, s0-k.reported[i]) }

// allReported reports whether every one of n fleets has been told of
// spending up to s0.
func (k *keyState) allReported(n int, s0 int64) bool {
	for i := range n {
		if k.reported[i] != s0 {
			return false
		}
	}
	return true
}

// roll moves k's reconciliation marks to the Window-long period now falls
// in, at spent s0.
func (k *keyState) roll(now int64, s0 int64) {
	idx := now / int64(k.policy().Window)
	switch idx {
	case k.markIdx:
		return
	case k.markIdx + 1:
		k.prevMark = k.mark
	default:
		k.prevMark = s0
	}
	k.markIdx, k.mark = idx, s0
}

// forgetStale drops from what fleet i is owed the consumption from before
// the previous period: by the time the fleet is back it has rolled out of
// the fleet's count, and reporting it would refuse requests for traffic
// long past.
func (k *keyState) forgetStale(i int) {
	if k.prevMark > k.reported[i] {
		k.reported[i] = k.prevMark
	}
}

// spend counts n admitted outside the lease.
func (k *keyState) spend(n int64) { k.extra.Add(n) }

// extend is the words' spent in full, given raw, their sum as wrapped.
// Sync loop only.
func (k *keyState) extend(raw uint32) int64 { return k.total + int64(int32(raw-k.wordSeen)) }

// trim keeps ratio (below 1) of what is left of the allowance, in the
// word and in every stripe; what it drops, unspent, goes back to the
// fleet at the next sync.
func (k *keyState) trim(ratio float64) {
	cut := func(w *atomic.Uint64) {
		for {
			v := w.Load()
			a := int64(float64(allowanceOf(v)) * ratio)
			if w.CompareAndSwap(v, v&^math.MaxUint32|uint64(a)) {
				return
			}
		}
	}
	cut(&k.word)
	if set := k.stripes.Load(); set != nil {
		for i := range set.s {
			cut(&set.s[i].word)
		}
	}
}

// zero drops what is left of the allowance: a lease that lapsed.
func (k *keyState) zero() {
	drain(&k.word)
	if set := k.stripes.Load(); set != nil {
		for i := range set.s {
			drain(&set.s[i].word)
		}
	}
}

// give returns n to the allowance, undoing a take. Spent goes back by as
// much as the allowance grew, so that nothing given back is ever both
// spendable and unreported; if a sync reported the take in between, the
// next sync sees spent below what it reported and reports nothing until
// spending catches up. A cost of zero or less gives nothing.
func (k *keyState) give(n int64) {
	if n <= 0 {
		return
	}
	for {
		w := k.word.Load()
		a := min(allowanceOf(w)+n, maxAllowance)
		back := uint32(a - allowanceOf(w))
		if k.word.CompareAndSwap(w, uint64(spentOf(w)-back)<<32|uint64(a)) {
			return
		}
	}
}

// grant installs a new allowance of lease, less what was spent since raw,
// the words' spent at the sync's start (for a striped key, since its
// stripes' marks).
func (k *keyState) grant(raw uint32, lease, low int64) {
	if set := k.stripes.Load(); set != nil {
		k.grantStriped(set, lease, low)
		return
	}
	s0 := raw - k.folded // the word's own spent
	for {
		w := k.word.Load()
		// Below zero if a Cancel gave back during the round trip: the
		// give-back goes with the new lease.
		a := lease - int64(int32(spentOf(w)-s0))
		a = max(0, min(a, maxAllowance))
		if k.word.CompareAndSwap(w, w&^math.MaxUint32|uint64(a)) {
			return
		}
	}
}
