package global

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// addGCRA counts n more requests in a strict GCRA key, whatever is left:
// its theoretical arrival time moves n emissions on, but never more than
// a full burst past now (an empty bucket). Charging twice charges twice.
// KEYS[1] as strictGCRA. ARGV: limit, window_us, burst, n. Returns {1}.
var addGCRA = redis.NewScript(storedNum + gcraNow + `
local new = math.min(tat + n * emission, now + burst * emission)
if n > 0 and new > tat then
  redis.call('SET', KEYS[1], new, 'PX', math.ceil((new - now) / 1000) + 1)
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

// Charge counts n requests for key in its strict state under limit, as
// if they had been admitted now, whatever the state has left, but never
// beyond an empty bucket. It is how a node reconciles what it admitted
// on its own while Redis could not be reached (a Strict policy's
// FailStatic or FailOpen decisions) once Redis answers again, so that the
// key does not start from a full bucket on top of them. Unlike
// ChargeAtLeast, charging twice charges twice: every node adds its own.
// A charge of 0 changes nothing but is still one round trip, a probe.
func (r *Redis) Charge(ctx context.Context, key string, limit Limit, n int64) error {
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if n < 0 {
		return fmt.Errorf("%w: Charge of %d requests for key %q; it must not be negative", ErrInvalid, n, key)
	}
	base, err := r.keyBase(key, Shard{})
	if err != nil {
		return err
	}
	_, err = r.runOne(ctx, strictCall(base, limit, min(n, MaxLimit), addGCRA, addSlidingWindow, 1))
	return err
}
