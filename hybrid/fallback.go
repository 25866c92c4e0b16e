package hybrid

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// What decides when the fleet cannot: a policy's FailMode, and for
// FailStatic the node's own bucket, sized to its share and cut by the
// partition ladder.

// failed decides, by the policy's FailMode, a request that neither the
// lease nor the fleet can answer. now is always read by then.
func (l *Limiter) failed(k *keyState, now, n int64) Decision {
	if n > k.policy().capacity {
		l.countFailed(k, n, false)
		return makeDecision(k.policy().capacity, 0, local.Never, 0, true) // not even FailOpen admits it
	}
	switch k.policy().OnUnreachable {
	case FailOpen:
		k.spend(n)
		l.countFailed(k, n, true)
		return makeDecision(k.policy().capacity, k.policy().capacity, 0, 0, true)
	case FailClosed:
		l.countFailed(k, n, false)
		return makeDecision(k.policy().capacity, 0, l.retryAfter(now), 0, true)
	}
	l.sizeFallback(k, now)
	r, err := k.policy().local.AllowNAt(k.key, l.epoch.Add(time.Duration(now)), int(n))
	if err != nil {
		l.keyFailed(k, err) // refused, and Health says why
	}
	if r.Allowed() && n > 0 {
		k.spend(n)
	}
	l.countFailed(k, n, r.Allowed())
	return degrade(r)
}

// share is the part of the fleet's quota this node counts as its own when
// it must decide alone: its last granted weight, or an equal part of the
// largest fleet it has seen.
func (l *Limiter) share(weight float64) float64 {
	if weight > 0 {
		return weight
	}
	return 1 / l.fleetSize()
}

// fleetSize is the largest fleet any grant reported, or FleetSize.
func (l *Limiter) fleetSize() float64 { return float64(max(1, l.nodesHint.Load())) }

// sizeFallback sizes k's fail-static bucket to this node's share of the
// policy, times the ladder's factor in force: once when the lease runs
// out, and again each time the ladder steps down. A Hybrid key's bucket
// starts with its share of what the fleet had left at the last sync, not
// full, so that an outage does not hand out a fresh burst; a token bucket
// keeps, at each step, the tokens it holds (up to the new burst) rather
// than owing the old rate's spending at the new one.
func (l *Limiter) sizeFallback(k *keyState, now int64) {
	if k.policy().local == nil {
		return
	}
	fbits := l.factorFor(k)
	old := k.fallback.Load()
	if old == fbits|sizedBit || !k.fallback.CompareAndSwap(old, fbits|sizedBit) {
		return // sized, or being sized by another request
	}
	w := l.share(math.Float64frombits(k.weightBits.Load())) * math.Float64frombits(fbits)
	limit := max(1, int64(w*float64(k.policy().Limit)))
	full := limit
	burst := int64(0)
	if k.policy().Algorithm == local.TokenBucket {
		burst = max(1, int64(w*float64(k.policy().Burst)))
		full = burst
	}
	at := l.wall(now)
	keep := int64(-1) // what the new bucket holds; -1: as SetLimit carries it
	switch {
	case old == 0 && k.hasGrant.Load():
		keep = int64(w * float64(max(0, k.fleetRemaining.Load())))
	case old != 0 && burst > 0:
		r, _ := k.policy().local.AllowNAt(k.key, at, 0)
		keep = r.Remaining()
	}
	if keep >= 0 {
		k.policy().local.Delete(k.key)
	}
	// The bucket is made, and drained, at the decision's time: a
	// drain dated before the bucket (as SetLimit, on the clock, once
	// dated it) would be refused and leave it full.
	if err := k.policy().local.SetLimitAt(k.key, at, limit, burst); err != nil {
		l.keyFailed(k, err) // the fallback cannot hold the key: MaxKeys
		return
	}
	if drain := full - keep; keep >= 0 && drain > 0 {
		_, _ = k.policy().local.AllowNAt(k.key, at, int(drain))
	}
}

// fallbackSteps is the ladder cfg climbs down, with its floor applied.
func fallbackSteps(cfg partition.LadderConfig) []partition.Step {
	steps := cfg.Steps
	if len(steps) == 0 {
		steps = partition.DefaultSteps
	}
	out := make([]partition.Step, len(steps))
	for i, st := range steps {
		out[i] = partition.Step{Until: st.Until, Factor: max(st.Factor, cfg.Floor)}
	}
	return out
}
