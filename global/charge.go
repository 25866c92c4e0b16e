package global

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// addGCRA counts n more requests in a strict GCRA key, whatever is left:
// its theoretical arrival time moves n emissions on, but never more than
// a full burst past now (an empty bucket). Charging twice charges twice.
// KEYS[1] as strictGCRA. ARGV: limit, window_us, burst, n. Returns {1}.
var addGCRA = redis.NewScript(storedNum + gcraNow + `
local new = math.min(tat + n * emission, now + burst * emission)
if n > 0 and new > tat then
  redis.call('SET', KEYS[1], gcraValue(new, emission), 'PX', math.ceil((new - now) / 1000) + 1)
end
return {1}
`)

// addSlidingWindow counts n more requests in a strict sliding window's
// current count, but never past an estimate of limit. Charging twice
// charges twice. KEYS[1] as strictSlidingWindow. ARGV: limit, window_us,
// n. Returns {1}.
var addSlidingWindow = redis.NewScript(storedNum + slidingNow + `
local add = math.min(n, limit - est)
if add > 0 then
  cur = cur + add
  redis.call('HSET', KEYS[1], 'w', w, 'cur', cur, 'prev', prevc)
  redis.call('PEXPIRE', KEYS[1], math.ceil(2 * window / 1000) + 1)
end
return {1}
`)

// Charge counts each charge's N requests in its key's (or shard's)
// strict state, as if they had been admitted now, whatever the state has
// left, but never beyond an empty bucket: how a node reconciles what it
// admitted on its own while Redis could not be reached (a Strict
// policy's FailStatic or FailOpen decisions) once Redis answers again, so
// that the key does not start from a full bucket on top of them. Unlike
// ChargeAtLeast, charging twice charges twice: every node adds its own.
//
// All charges go in one pipelined round trip per Redis node. Charge
// returns one error per charge (nil, or an error of that key's: a limit
// or key out of range, wrapping ErrInvalid; state no node could have
// written, wrapping ErrCorrupt; wrapping ErrUnreachable, its Cluster
// master down while others answered), or an error wrapping
// ErrUnreachable if Redis could not be reached; then none of the charges may be counted,
// or some may be, and a caller that sends them again risks counting
// those twice, which refuses, never admits, too much.
func (r redisStore) Charge(ctx context.Context, charges []store.StrictCharge) ([]error, error) {
	errs := make([]error, len(charges))
	calls := make([]scriptCall, 0, len(charges))
	idx := make([]int, 0, len(charges))
	for i, c := range charges {
		if err := c.Limit.Validate(); err != nil {
			errs[i] = fmt.Errorf("%w: key %q: %v", fleet.ErrInvalid, c.Key, err)
			continue
		}
		if c.N < 0 {
			errs[i] = fmt.Errorf("%w: Charge of %d requests for key %q; it must not be negative", fleet.ErrInvalid, c.N, c.Key)
			continue
		}
		base, err := r.keyBase(c.Key, c.Shard)
		if err != nil {
			errs[i] = err
			continue
		}
		calls = append(calls, strictCall(base, c.Limit, min(c.N, fleet.MaxLimit), addGCRA, addSlidingWindow, 1))
		idx = append(idx, i)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res, err := r.run(ctx, calls)
	if err != nil {
		return nil, err
	}
	for j, c := range res {
		errs[idx[j]] = c.err
	}
	return errs, nil
}
