package global

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// The Lua scripts run atomically in Redis and take the time from Redis's
// own TIME, so nodes' clocks never matter. Times inside are microseconds
// since the epoch, about 1.8e15: numbers are handed to redis.call as
// numbers, which Redis formats with 17 significant digits, never through
// tostring, whose 14 digits would round a time to 100 µs.
//
// Lease state for one limit lives in one hash, in one slot:
//
//	tokens, ts        token bucket: tokens left (may go negative: debt
//	                  from consumption reported after an outage) and when
//	b                 token bucket: the burst tokens counts from; a lease
//	                  under another (its policy changed) keeps what was
//	                  spent, burst - tokens
//	w, cur, prev      sliding window: the current window number, its count
//	                  and the previous window's count
//	l:<node>          the node's outstanding lease
//	g:<node>          when it was granted (token bucket) or in which window
//	                  (sliding window)
//	d:<node>          the node's last reported demand
//	s:<node>          when the node last synced
//	k:<node>, c:<node> the node's report series and the most its Total
//	                  has been in it (see fleet.Usage.Series)
//	p:<node>          token bucket: what was reserved for it while silent
//	t:<node>          token bucket: how long its lease stands, if granted
//	                  to rest on (µs; see leaseTokenBucket)
//	x                 when the hash expires (µs; see writeState)
//	aT, aI, aD,       the nodes' aggregate, on a key of more than one
//	aN, aO, aR,       node (see leaseNodes), good until aE if aX, the
//	aE, aX            scan it was written for, is aT
//
// A node not seen for stale microseconds stops counting as active; its
// fields are deleted a while later (see leaseCommon), and its lease, if
// unspent, is simply gone (the bucket refills regardless).

// storedNum starts every script that reads state: values read back from
// Redis are not trusted. A hash field or string a script never wrote,
// or a number out of the range a script keeps it in (nan, inf, a
// negative time, a shard count of 0), fails the call with an error
// starting CORRUPT, rather than leasing, deciding or charging from it:
// tonumber of garbage is nil, which the scripts would read as a fresh
// key, or nan, which every comparison lets through. huge, 2^62, bounds
// every number kept, so that no reply can overflow an int64; counts
// written are kept within it (clampN).
var storedNum = `
local huge = 4611686018427387904
local maxShards = ` + strconv.Itoa(fleet.MaxShards) + `
local maxLimit = ` + strconv.Itoa(fleet.MaxLimit) + `

local function broken(why)
  error('CORRUPT ' .. why, 0)
end

local function corrupt(what, v)
  broken(what .. ' holds ' .. string.format('%q', string.sub(tostring(v), 1, 40)))
end

-- stored is v, a value read for what, as a number no less than lo; nil
-- if there was none (HMGET and GET give false).
local function stored(v, what, lo)
  if not v then return nil end
  local x = tonumber(v)
  if x == nil or x ~= x or x < lo or x > huge then corrupt(what, v) end
  return x
end

-- shardCount is v, a shard count read for what: a whole number from 2
-- to maxShards, or nil if there was none.
local function shardCount(v, what)
  local n = stored(v, what, 2)
  if n and (n > maxShards or n ~= math.floor(n)) then corrupt(what, v) end
  return n
end

-- whole is v, a value read for what, as a whole number from lo to
-- maxLimit (a report's series or Total), or nil if there was none.
local function whole(v, what, lo)
  local n = stored(v, what, lo)
  if n and (n > maxLimit or n ~= math.floor(n)) then corrupt(what, v) end
  return n
end

local function clampN(x)
  return math.max(-huge, math.min(huge, x))
end
`

// redisNow reads Redis's clock into now, in microseconds.
const redisNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// tokenRefill refills a token bucket holding tokens at ts to now, at
// rate per microsecond, up to burst (which a bucket kept under a larger
// burst is brought down to at once).
const tokenRefill = `
local function refill(tokens, ts, now, rate, burst)
  if now > ts then tokens = tokens + (now - ts) * rate end
  return math.min(burst, tokens)
end
`

// slidingRoll moves a sliding window's counts to window w: st holds the
// stored window number, its count and the previous window's count. It
// follows storedNum.
// estimate weighs the previous window's count by the part of the
// sliding window still over it, elapsed into the current one.
const slidingRoll = `
local function estimate(cur, prevc, window, elapsed)
  return math.ceil(prevc * (window - elapsed) / window) + cur
end

local function roll(w, st)
  local sw = stored(st[1], 'w', 0) or w
  local cur, prevc = stored(st[2], 'cur', 0) or 0, stored(st[3], 'prev', 0) or 0
  if sw == w - 1 then
    return 0, cur
  elseif sw < w - 1 then
    return 0, 0
  end
  return cur, prevc
end
`

// slidingNow reads a strict sliding window (KEYS[1], a hash {w, cur,
// prev}) at Redis's time. ARGV: limit, window_us, n. It leaves now, limit,
// window, n, the window number w, its start's distance elapsed, the rolled
// counts cur and prevc, and the estimate est.
const slidingNow = slidingRoll + redisNow + `
local limit, window, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local w = math.floor(now / window)
local st = redis.call('HMGET', KEYS[1], 'w', 'cur', 'prev')
local cur, prevc = roll(w, st)
local elapsed = now - w * window
local est = estimate(cur, prevc, window, elapsed)
`

// gcraState reads and writes a strict GCRA key's state: its theoretical
// arrival time and the emission interval (µs a token) it was written
// under, "tat;emission". gcraTat reads state v at now for a limit of
// emission: the arrival time, no earlier than now; a state written under
// another emission (the limit changed: SetPolicies, a load factor, a
// limit given per call) keeps the tokens it spent, not the fraction of
// the burst: what lies ahead of now is rescaled to this emission, and
// written back with an expiry for it (a lower limit's debt outlives the
// old expiry). A bare
// arrival time, as an earlier version wrote, is taken as written under
// this emission. gcraValue is the state to write, its numbers formatted
// with 17 digits (tostring's 14 would round a time to 100 µs). They
// follow storedNum.
const gcraState = `
local function gcraValue(tat, emission)
  return string.format('%.17g;%.17g', tat, emission)
end

local function gcraTat(v, now, emission)
  if not v then return now end
  local t, e = string.match(v, '^([^;]+);([^;]+)$')
  local tat, was
  if t then
    tat, was = stored(t, 'tat', 0), stored(e, 'the emission', 0)
    if was <= 0 then corrupt('the emission', v) end
  else
    tat = stored(v, 'tat', 0)
  end
  if tat <= now then return now end
  if was and was ~= emission then
    tat = now + (tat - now) * emission / was
    if tat > huge then corrupt('tat', v) end
    -- The key's expiry was set for the old arrival time: a lower limit
    -- moves it later, and the debt must outlive it.
    redis.call('SET', KEYS[1], gcraValue(tat, emission), 'PX', math.ceil((tat - now) / 1000) + 1)
  end
  return tat
end

`

// gcraNow reads a strict GCRA key (KEYS[1], its state: gcraState) at
// Redis's time. ARGV: limit, window_us, burst, n. It leaves now, limit,
// window, burst, n, emission and tat, no earlier than now.
const gcraNow = redisNow + gcraState + `
local limit, window, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local emission = window / limit
local tat = gcraTat(redis.call('GET', KEYS[1]), now, emission)
`

// shardedGuard answers, before a strict script decides, for a key marked
// as split into shards: KEYS[2] holds the shard count, and expires when
// the split ends (a mark that never would is not one MarkShards set). It
// returns {2, shards, 0, ttl_us}. It follows storedNum.
const shardedGuard = `
local shards = shardCount(redis.call('GET', KEYS[2]), 'the shard mark')
if shards then
  local left = redis.call('PTTL', KEYS[2])
  if left < 0 then broken('the shard mark has no ttl') end
  return {2, shards, 0, left * 1000}
end
`

// strictRead reads a strict GCRA key's state (KEYS[1]) and its shard
// mark (KEYS[2]) in one MGET, as got, answers as shardedGuard does for a
// marked key, and reads the time. With a GET for each it was 5 commands
// a decision to go-redis/redis_rate's 4; it is 4. MGET reads a value of
// another type as none, where GET failed WRONGTYPE: a mark of another
// type is no mark, and the key itself decides, exactly; a state of
// another type is a full bucket, which the SET that follows replaces. It
// grants nothing a DEL of the key would not, and whoever can write the
// one can do the other; a value of the right type that no script writes
// is still refused as corrupt. Looking for it (EXISTS) would cost every
// decision of a key under its limit, whose state has expired, the
// command saved. It follows storedNum.
const strictRead = `
local got = redis.call('MGET', KEYS[1], KEYS[2])
local shards = shardCount(got[2], 'the shard mark')
if shards then
  local left = redis.call('PTTL', KEYS[2])
  if left < 0 then broken('the shard mark has no ttl') end
  return {2, shards, 0, left * 1000}
end
` + redisNow

// markShardsScript: KEYS[1] the shard marker. ARGV: shards, ttl_ms. Keeps a
// marker's shard count, renews its ttl. Returns {shards in force}.
var markShardsScript = redis.NewScript(storedNum + `
local n = shardCount(redis.call('GET', KEYS[1]), 'the shard mark')
if n and redis.call('PTTL', KEYS[1]) < 0 then broken('the shard mark has no ttl') end
n = n or tonumber(ARGV[1])
redis.call('SET', KEYS[1], n, 'PX', ARGV[2])
return {n}
`)

// strictGCRA decides one request in Redis, as go-redis/redis_rate does:
// KEYS[1] holds the theoretical arrival time, KEYS[2] the shard marker.
// ARGV: limit, window_us, burst, cost. Returns {allowed, remaining,
// retry_after_us, reset_after_us}, or shardedGuard's answer.
var strictGCRA = redis.NewScript(storedNum + strictRead + gcraState + `
local limit, window, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local emission = window / limit
local tat = gcraTat(got[1], now, emission)
local cost = n
local tau = burst * emission
local new = tat + cost * emission
if cost > burst then
  local remaining = math.max(0, math.floor((tau - (tat - now)) / emission))
  return {0, remaining, -1, math.ceil(tat - now)}
end
if new - now > tau then
  local remaining = math.floor((tau - (tat - now)) / emission)
  if remaining < 0 then remaining = 0 end
  return {0, remaining, math.ceil(new - tau - now), math.ceil(tat - now)}
end
redis.call('SET', KEYS[1], gcraValue(new, emission), 'PX', math.ceil((new - now) / 1000) + 1)
return {1, math.floor((tau - (new - now)) / emission), 0, math.ceil(new - now)}
`)

// strictSlidingWindow decides one request against a sliding window
// counter in Redis. KEYS[1] is a hash {w, cur, prev}, KEYS[2] the shard
// marker. ARGV: limit, window_us, cost. Returns as strictGCRA.
var strictSlidingWindow = redis.NewScript(storedNum + shardedGuard + slidingNow + `
local cost = n
if cost > limit then
  return {0, math.max(0, limit - est), -1, (w + 2) * window - now}
end
if est + cost > limit then
  local retry
  local room = limit - cur - cost
  if room >= 0 then
    retry = window - math.floor(room * window / prevc) - elapsed
  else
    room = limit - cost
    if cur <= room then
      retry = (w + 1) * window - now
    else
      retry = (w + 1) * window + window - math.floor(room * window / cur) - now
    end
  end
  if retry < 1 then retry = 1 end
  return {0, math.max(0, limit - est), retry, (w + 2) * window - now}
end
cur = cur + cost
redis.call('HSET', KEYS[1], 'w', w, 'cur', cur, 'prev', prevc)
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * window / 1000) + 1)
return {1, limit - est - cost, 0, (w + 2) * window - now}
`)

// chargeGCRA moves a GCRA key's theoretical arrival time to at least now
// + used emissions: what is left is then at most burst - used. Charging
// twice charges once. KEYS[1] as strictGCRA. ARGV: limit, window_us,
// burst, used. Returns {1}.
var chargeGCRA = redis.NewScript(storedNum + gcraNow + `
local floor = now + math.min(n, burst) * emission
if floor > tat then
  redis.call('SET', KEYS[1], gcraValue(floor, emission), 'PX', math.ceil((floor - now) / 1000) + 1)
end
return {1}
`)

// chargeSlidingWindow raises a sliding window's estimate to at least
// used, adding the difference to the current window's count. Charging
// twice charges once. KEYS[1] as strictSlidingWindow. ARGV: limit,
// window_us, used. Returns {1}.
var chargeSlidingWindow = redis.NewScript(storedNum + slidingNow + `
local used = math.min(n, limit)
if used > est then
  cur = cur + used - est
  redis.call('HSET', KEYS[1], 'w', w, 'cur', cur, 'prev', prevc)
  redis.call('PEXPIRE', KEYS[1], math.ceil(2 * window / 1000) + 1)
end
return {1}
`)

// A Hybrid key's leases are split by a lease mark: a hash {n, until}
// in the key's slot, beside its lease state. Unlike a strict mark it
// does not vanish when it ends: until passes, and the lease scripts go
// on sending nodes to the shards, with no time left, until a node has
// charged the key with what the shards spent and ended the mark
// (endLeaseMark). Otherwise a node new to the key could lease from its
// state as the split froze it, before anyone charged it.

// leaseMarkFn reads lease mark k at now: its shard count (nil if none),
// its end, and the time left to it (not below zero). A mark has both or
// neither. It follows storedNum.
const leaseMarkFn = `
local function leaseMark(k, now)
  local mk = redis.call('HMGET', k, 'n', 'until')
  local n, ends = shardCount(mk[1], 'the lease mark'), stored(mk[2], 'the lease mark\'s end', 0)
  if (n == nil) ~= (ends == nil) then broken('the lease mark has one of n and until') end
  ends = ends or 0
  return n, ends, math.max(0, ends - now)
end
`

// leaseMarkNow reads the lease mark KEYS[1] at Redis's time: it leaves
// now, n (nil if none), ends (its until) and left (not below zero).
const leaseMarkNow = leaseMarkFn + redisNow + `
local n, ends, left = leaseMark(KEYS[1], now)
`

// markLease: KEYS[1] a lease mark. ARGV: shards (0: only extend), ttl_us,
// keep_ms. Extends a standing mark to at least ttl from now, never
// shortening it, or sets one if there is none and shards is not 0.
// Returns {shards in force, left_us}: {n, 0} for a mark that has ended
// but not been merged, {0, 0} if there is none to extend.
var markLease = redis.NewScript(storedNum + leaseMarkNow + `
local shards, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if n then
  if left == 0 then return {n, 0} end
  if now + ttl > ends then
    ends = now + ttl
    redis.call('HSET', KEYS[1], 'until', ends)
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
  end
  return {n, ends - now}
end
if shards == 0 then return {0, 0} end
redis.call('HSET', KEYS[1], 'n', shards, 'until', now + ttl)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {shards, ttl}
`)

// readLeaseMark: KEYS[1] a lease mark. Returns {shards, left_us}, {0, 0}
// if there is none.
var readLeaseMark = redis.NewScript(storedNum + leaseMarkNow + `
return {n or 0, left}
`)

// endLeaseMark: KEYS[1] a lease mark. Deletes it if it has ended.
// Returns {1} if there is none left, {0} if it stands.
var endLeaseMark = redis.NewScript(storedNum + leaseMarkNow + `
if n and left > 0 then return {0} end
redis.call('DEL', KEYS[1])
return {1}
`)

// leaseNow reads a lease state hash (KEYS[1]) at Redis's time. ARGV:
// algorithm (0 token bucket, 1 sliding window), limit, window_us, burst,
// n. It leaves now, n, and used: what the state shows spent now, leases
// included (a token bucket's missing tokens, refilled to now; a sliding
// window's estimate); and, to write the state back, tokens (token
// bucket) or w, cur and prevc (sliding window).
const leaseNow = slidingRoll + tokenRefill + redisNow + `
local sw, limit, window, burst, n = ARGV[1] == '1', tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local used, tokens, w, cur, prevc, elapsed
if sw then
  w = math.floor(now / window)
  cur, prevc = roll(w, redis.call('HMGET', KEYS[1], 'w', 'cur', 'prev'))
  elapsed = now - w * window
  used = estimate(cur, prevc, window, elapsed)
else
  local st = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'b')
  tokens = stored(st[1], 'tokens', -huge)
  local was = whole(st[3], 'b', 1)
  if tokens and was and was ~= burst then tokens = tokens + burst - was end -- see leaseTokenBucket
  tokens = refill(tokens or burst, stored(st[2], 'ts', 0) or now, now, limit / window, burst)
  used = math.max(0, math.ceil(burst - tokens))
end
`

// leaseUsedScript: KEYS[1] a lease state hash. ARGV as leaseNow, n unused.
// Returns {used}.
var leaseUsedScript = redis.NewScript(storedNum + leaseNow + `
return {used}
`)

// chargeLease raises what a lease state (KEYS[1]) shows spent to at
// least n, as chargeGCRA and chargeSlidingWindow do for strict state:
// charging twice charges once. ARGV as leaseNow, then ttl_ms, the least
// the state should live, and stale_us: nodes not seen for that long are
// forgotten first (0: none), sooner than the lease scripts forget them,
// so that a node that comes back reports against no lease: the charge
// counts their leases as spent. Returns {1}.
var chargeLease = redis.NewScript(storedNum + leaseCommon + leaseNodes + leaseNow + `
local stale = tonumber(ARGV[7])
if stale > 0 then
  local h = readState(KEYS[1])
  if sw then
    -- A sliding window's resting lease is counted in its window as any
    -- other: the charge counts it as spent, and its node, forgotten with
    -- the others, reports against none (kept, its report gave the lease
    -- back: a merge counted 278 fewer than were spent,
    -- TestLeaseMergeForgetsSplitLeases).
    for f in pairs(h) do
      if string.sub(f, 1, 2) == 't:' then
        h[f] = nil
        redis.call('HDEL', KEYS[1], f)
      end
    end
  end
  scan(h, KEYS[1], '', now, stale, stale, stale / 3) -- forgets them at once (but those resting on a token bucket's lease)
  redis.call('HDEL', KEYS[1], 'aT', 'aI', 'aD', 'aN', 'aO', 'aR', 'aE', 'aX') -- the next lease counts the nodes afresh (see fleetOf)
end
local cap = burst
if sw then cap = limit end
local want = math.min(n, cap)
if want <= used then return {1} end
if sw then
  redis.call('HSET', KEYS[1], 'w', w, 'cur', cur + want - used, 'prev', prevc)
else
  redis.call('HSET', KEYS[1], 'tokens', burst - want, 'ts', now, 'b', burst)
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[6]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
return {1}
`)
