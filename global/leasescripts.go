package global

import (
	"strconv"

	"github.com/hybridlimit/hybridlimit/internal/store"
)

// The lease scripts' work for one key, which the lease batch (see
// leaseBatch) runs for each of its keys. Their state is described with
// storedNum.

// leaseCommon is shared by both lease scripts: it reads the key's own
// fields, the node's and the nodes' aggregate (readOwn), and from the
// aggregate the active nodes, their total demand and (token bucket)
// their live leases (fleetOf); at most once an interval a lease reads
// every node instead (scan) and rebuilds the aggregate. A node not heard from
// for stale µs stops counting as active; its fields are kept for keep
// µs more (a window, at most 100 intervals), so that a node back from a
// partition settles the lease it held instead of having it charged
// twice, and then forgotten. scanned counts the fields scans have read,
// for the lease batch's work budget (see leaseBatch).
// It follows storedNum; leaseNodes follows it.
var leaseCommon = `
local staleIntervals = ` + strconv.Itoa(staleIntervals) + `
local maxHold = ` + strconv.Itoa(store.MaxHold) + ` -- intervals: the longest a lease rests
local scanned = 0
local hold = 0 -- the lease batch sets it, a key at a time: fleet.Usage.Hold, µs

-- restsUntil is until when (µs) node n's lease stands, if it was
-- granted to rest on (see leaseTokenBucket, leaseSlidingWindow): 0 if
-- not. Its TTL is held in t:<n>, in µs (0 for a lease of two
-- intervals), from when it was granted, s:<n> (a token bucket's g:<n>
-- too; a sliding window's is a window number), and read as no more than
-- maxHold intervals.
local function restsUntil(h, n, interval)
  local t = stored(h['t:' .. n], 't:' .. n, 0)
  if not t or t <= 0 then return 0 end
  return (stored(h['s:' .. n], 's:' .. n, 0) or 0) + math.min(t, maxHold * interval)
end

local function readState(key)
  local all = redis.call('HGETALL', key)
  scanned = scanned + #all / 2
  local h = {}
  for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
  return h
end

-- readOwn reads what a lease of node needs of key's hash but the other
-- nodes' fields: the key's, the node's and the fleet's aggregate (see
-- fleetOf), one HMGET whose cost does not grow with the nodes on the key.
local function readOwn(key, node)
  local f = {'tokens', 'ts', 'b', 'x', 'w', 'cur', 'prev', 'aT', 'aI', 'aD', 'aN', 'aO', 'aR', 'aE', 'aX',
    's:' .. node, 'd:' .. node, 'l:' .. node, 'g:' .. node, 'k:' .. node, 'c:' .. node, 'p:' .. node, 'q:' .. node, 'pw:' .. node, 't:' .. node}
  local v = redis.call('HMGET', key, unpack(f))
  local h, n = {}, 0
  for i = 1, #f do
    if v[i] then h[f[i]], n = v[i], n + 1 end
  end
  return h, n
end

-- writeState writes a lease's fields f (name, value, ...) to key in one
-- HSET, with the node's report series and its Total if it has one, and
-- keeps the key for at least ttl_ms past now: it sets the key's expiry
-- to twice that when what is left of it (kept in field x, in µs, since
-- only these scripts set the key's expiry and chargeLease only
-- lengthens it) is less than ttl. A PEXPIRE at every lease was a
-- command in four; now one in about ttl / (2 intervals). An x further
-- off than twice longest (ms: ttl, or math.huge while any node's lease
-- rests on the key) was written by no lease at this clock (Redis's
-- clock went back, or a value no script wrote): renewed, so that it
-- cannot hold the expiry back. While a lease rests, no x is too far:
-- renewed past twice its own ttl, a node new to a key (its Hold short,
-- or its Interval), cut the key's expiry under another node's resting
-- lease, and the state expired while the lease stood. (A false x far
-- off is then believed until no lease rests: the key keeps the expiry
-- set last, and expires then, as if deleted.)
local function writeState(h, key, now, ttl, longest, f, node, series, upto)
  if series then
    f[#f + 1], f[#f + 2], f[#f + 3], f[#f + 4] = 'k:' .. node, series, 'c:' .. node, upto
  end
  local x = stored(h['x'], 'x', 0)
  local renew = not x or x - now < ttl * 1000 or x - now > 2 * longest * 1000
  if renew then
    f[#f + 1], f[#f + 2] = 'x', now + 2 * ttl * 1000
  end
  redis.call('HSET', key, unpack(f))
  if renew then redis.call('PEXPIRE', key, 2 * ttl) end
end

-- spentBy is what a node cut off for e µs may have spent, in µs of its
-- share, on the fallback steps (until_us, factor pairs): the last step,
-- which lasts for ever, is not in steps, so a silent node is reserved
-- for the finite steps only (a node that died is not mourned for ever).
local function spentBy(e, steps)
  local sum, from = 0, 0
  for i = 1, #steps, 2 do
    if e <= from then break end
    sum = sum + steps[i + 1] * (math.min(e, steps[i]) - from)
    from = steps[i]
  end
  return sum
end

-- reserve charges the bucket, as spent, for what each silent node (not
-- heard from for more than stale, demanding something when last heard)
-- may spend on its fallback steps from an interval after it was last
-- heard, at its share of the rate: its part of the demand then, or an
-- equal part. Until an interval from now: the next scan, which charges
-- again, is an interval away (charged up to now only, a cut-off half of
-- the fleet spent up to an interval's share uncharged, and the
-- simulator's partition's worst window went from 7.5% to 9.2% over the
-- limit). What was charged is kept in p:<node>, settled when the node
-- reports again. It returns what it charged now.
--
-- wstart, a sliding window's (nil for a token bucket), is when its
-- current window began, and window its length: what a silent node may
-- have spent since the previous window began (what weighs in the
-- estimate) is charged to the current window; before that, it is
-- reckoned (q:<node>, what was charged or reckoned so far) but not
-- charged. The window of the first charge is kept (pw:<node>): a node
-- back within it gets back what was charged beyond what it reports (see
-- leaseSlidingWindow). Charged from its first silence at the first
-- lease that scanned, an outage of the whole fleet put the silent
-- nodes' shares of all of it in one window, never given back (a counted
-- key of a day-long window on real Redis, TestRedisOutage: 17,169
-- counted for 4,794 admitted). In whole tokens, so that a window's count
-- stays whole and a node back gets back what was charged (a fraction
-- written to the hash reads back as 14 digits). (Each part charged to
-- the window it fell in, the previous one's to the previous window,
-- the simulator's partition's worst window was 14% over the limit, not
-- 9.1%: the weights a scan reckons with drift, and what a rise adds
-- for the time already reckoned is charged now.)
local function reserve(key, silent, total, count, equal, rate, interval, now, steps, wstart, window)
  local sd = 0
  for _, s in ipairs(silent) do sd = sd + s.d end
  local charged = 0
  for _, s in ipairs(silent) do
    local w = s.d / (total + sd)
    if equal then w = 1 / (count + #silent) end
    local want = rate * w * spentBy(now - s.seen, steps)
    if not wstart then
      if want > s.p then
        charged = charged + (want - s.p)
        redis.call('HSET', key, 'p:' .. s.n, want)
      end
    else
      want = math.floor(want)
      local from = 0
      if wstart - window > s.seen then from = math.floor(rate * w * spentBy(wstart - window - s.seen, steps)) end
      local base = math.max(s.q, from)
      if want > base then
        charged = charged + (want - base)
        local f = {'p:' .. s.n, s.p + want - base, 'q:' .. s.n, want}
        if s.p == 0 then f[5], f[6] = 'pw:' .. s.n, wstart end
        redis.call('HSET', key, unpack(f))
      elseif want > s.q then
        redis.call('HSET', key, 'q:' .. s.n, want)
      end
    end
  end
  return charged
end

-- stepsOf reads the fallback steps from ARGV, from index i: a count,
-- then that many until_us, factor pairs.
local function stepsOf(i)
  local steps = {}
  for j = 1, 2 * tonumber(ARGV[i]) do steps[j] = tonumber(ARGV[i + j]) end
  return steps
end

-- once is what of consumed a report of series, at total, adds to what
-- the node's reports of that series already brought (k and c, its
-- stored fields): a report applied but sent again counts once. It
-- returns that, the fields' new values, and whether the report is behind
-- the series (its Total below the most it has been: a report that
-- arrives after a later one, or one after a Cancel), which gives nothing
-- back: the lease the node may hold from the later report stays out.
local function once(consumed, series, total, k, c)
  if series == 0 then return consumed, nil, nil, false end
  if k ~= series or not c then return consumed, series, total, false end
  return math.min(consumed, math.max(0, total - c)), series, math.max(c, total), total < c
end

-- share is this node's weight: an equal part of the active nodes when
-- equal is set, otherwise its part of the total demand (an equal part if
-- nobody demands anything).
local function share(demand, total, count, equal)
  if equal or total <= 0 then return 1 / count end
  return demand / total
end

-- grantFrom leases what the node demands, up to its weight's part of the
-- capacity (so no node starves the others), or of twice the refill over
-- its turn while less than a quarter of the capacity is available (see
-- turnOf; nil for no turn), and at least its equal part of what is free
-- beyond a quarter of the capacity, up to most (see slackOf); never more
-- than is available, and at least one token when anything is wanted and
-- available. A token bucket's lease may take its lag (see lagOf) beyond
-- what is available; nil for none.
local function grantFrom(avail, demand, weight, capacity, count, most, lag, turn)
  lag = lag or 0
  if avail + lag < 1 or demand <= 0 then return 0 end
  local g = math.ceil(capacity * weight)
  if turn and avail < capacity / 4 and g > 2 * turn * weight then g = math.ceil(2 * turn * weight) end
  if g < 1 then g = 1 end
  if g > demand then g = demand end
  local slack = math.min(math.floor(math.max(0, avail - capacity / 4) / count), most)
  if g < slack then g = slack end
  if g > avail + lag then g = math.floor(avail + lag) end
  return g
end
`

// slackOf is the most a lease takes beyond the node's demand: its equal
// part of what is free beyond a quarter of the capacity (see grantFrom),
// so that while the key is well under its limit
// every active node holds enough to absorb a burst (the part shrinks as
// the key nears its limit), up to what the limit refills in two
// intervals (a node that vanishes takes its lease with it). Only while
// leases are short beside the window (interval at most an eighth of
// it): a lease that outlives a good part of the window, spent in the
// next one, overshoots it, which the simulator showed at a 500 ms
// interval on a 1 s window (worst window 7% -> 24% over the ideal).
// It follows leaseCommon.
const slackOf = `
local function slackOf(limit, window, interval)
  if 8 * interval > window then return 0 end
  return math.ceil(limit * 2 * interval / window)
end
`

// turnOf is what the limit refills over a node's turn at a key near its
// limit, when the interval is more than an eighth of the window (when
// slackOf lends nothing), else nil: a node whose lease was cut syncs
// again an interval later, or, when the interval is as long as the
// window, an eighth of the window later (hybrid's gapOf). While little
// is available a lease takes at most its weight's part of twice that
// (grantFrom). At the limit the bucket holds only what refilled since
// the last node's sync, and leased up to its weight's part of the whole
// capacity the node that synced after a quiet spell took all of it: one
// node held half a window's refill while the next ones were leased
// crumbs and waited out their turns, and the fleet's admissions swung
// by hundreds a window as those leases were spent across the windows'
// edges (simulator, 8 nodes syncing every 2 s on a 1 s window at twice
// the limit: worst window 9.7-15% over the ideal; 3-6% now, false
// rejection 1.9-3.1% -> 0.7-1.5%). Twice the turn, so that the nodes'
// leases over a turn can take the whole refill however their syncs fall.
const turnOf = `
local function turnOf(limit, window, interval)
  if 8 * interval <= window then return nil end
  local turn = interval
  if interval >= window then turn = window / 8 end
  return limit * turn / window
end
`

// lagOf is how far a token bucket's lease may take ahead of its bucket:
// what the limit refills in a fifth of an interval, while the interval is
// at most an eighth of the window (as slackOf), else nothing, and at most
// a fortieth of the burst (what a fifth of an eighth of the window refills
// when the burst is the limit): sized by the limit alone, a small burst
// (10,000 a second, a burst of 100) lent a lag of 200, and eight nodes
// held 274 against a bucket of 100 (review).
//
// At the limit the bucket's refill waits in Redis until the next lease
// takes it, so the fleet admits what an ideal limiter admits a moment
// later: the time since the last node's sync behind it, and the lease
// last taken, not yet spent. When a burst ends the fleet is that much
// behind, and the idle time that refills the bucket to its cap wipes the
// difference out: every burst lost 1-2.5% of what the ideal admitted
// (simulator, bursts, 8 nodes at 100 ms, five seeds: 1.59% false
// rejection; docs/tuning.md). A lease that may take the lag ahead puts
// the fleet level with the ideal: 0.62%, at the same store operations
// (at 4 and 16 nodes 1.42% -> 0.59% and 1.59% -> 0.60%), where smaller,
// more frequent leases cost 2-5.5 times the operations. The price is the
// lag itself: the bucket may owe that much, never more (a lease takes at
// most what the bucket holds and its lag, so one that owes its lag lends
// nothing more until the refill repays it), and the fleet may admit that
// much before the ideal would, 2% of the limit at an interval of a tenth
// of the window (bursts' worst window 0 -> 0.9% over the ideal; steady's
// unchanged). A fifth: a quarter took bursts to 0.42% at a worst window
// of 1.4%, a tenth to 0.97% (the default seed; its worst window 0), and
// one node's worst window grows by the whole lag (bursts, five seeds:
// 5.2% -> 7.2%).
const lagOf = `
local function lagOf(limit, window, interval, burst)
  if 8 * interval > window then return 0 end
  return math.min(math.floor(limit * interval / (5 * window)), math.floor(burst / 40))
end
`

// leaseTokenBucketFn defines the lease of one key, leaseTokenBucket (and
// leaseSlidingWindowFn, leaseSlidingWindow), as Lua functions of the same arguments: key, the
// state hash; mark, the key's lease mark (see markLease); now, Redis's
// time (µs); node; interval_us; stale_us; equal (true: equal shares,
// else demand-weighted); steps, the fallback steps (see stepsOf); limit;
// window_us; burst (unused by the sliding window); consumed; demand;
// ttl_ms; the report's series and total, rseries and rtotal (see once);
// for the sliding window, paced (see fleet.Usage.Paced); and alive, the
// fleet's set of nodes heard (see heard).
//
// Each returns {lease, lease_ttl_us, used, remaining, nodes,
// weight*1e6, reset_after_us, now_us, 0, 0, paced, paced_for_us}; or, for a key whose leases
// are split into shards (its mark stands until a merge ends it), zeros
// but for {..., shards, left_us}, left_us 0 once the split has ended
// and awaits its merge: nothing the node reported is applied, so that
// it reports it to the shards instead.
//
// The token bucket settles the node's last lease, refills, and grants
// from what its burst leaves beside the other nodes' live leases; it
// paces nothing. The sliding window's is leaseSlidingWindowFn.
//
// They follow storedNum, leaseCommon, leaseNodes, slackOf, lagOf, turnOf, tokenRefill, slidingRoll
// and leaseMarkFn.
const leaseTokenBucketFn = `
local function leaseTokenBucket(key, mark, now, node, interval, stale, equal, steps, limit, window, burst, consumed, demand, ttl, rseries, rtotal, _, alive)
  local marked, _, markLeft = leaseMark(mark, now)
  if marked then return {0, 0, 0, 0, 0, 0, 0, 0, marked, markLeft, 0, 0} end
  local rate = limit / window

  local h, read = readOwn(key, node)
  local st = {h['tokens'], h['ts'], h['l:' .. node], h['g:' .. node], h['k:' .. node], h['c:' .. node], h['p:' .. node]}
  -- A bucket counted under another burst (its policy changed) keeps
  -- what it has spent: the tokens it lacks, not those it holds.
  local tokens, was = stored(st[1], 'tokens', -huge), whole(h['b'], 'b', 1)
  if tokens and was and was ~= burst then tokens = tokens + burst - was end
  tokens = refill(tokens or burst, stored(st[2], 'ts', 0) or now, now, rate, burst)
  -- More than a quarter of the burst spent (the bucket and the leases
  -- out, as the aggregate last held them, under three quarters): the key
  -- is no longer far from its limit, and a node resting on it that Redis
  -- no longer hears is cut off (see scan).
  local hot = tokens + (aggregate(h['aO'], 0, huge) or 0) < burst * 3 / 4
  local k = whole(st[5], 'k:' .. node, 1)
  local series, upto, behind
  consumed, series, upto, behind = once(consumed, rseries, rtotal, k, whole(st[6], 'c:' .. node, 0))

  -- Back from silence: what was reserved for this node was charged as
  -- spent; what it reports is charged only beyond that. Nothing is given
  -- back: the reserve was taken from buckets long refilled, and the report
  -- holds only the last window or two of the silence (older consumption is
  -- dropped by the node), so a refund would hand the fleet a burst. A
  -- report of a series other than the node's last (a restarted process)
  -- holds what was spent since it began, not while the node was silent:
  -- it is charged in full, and the reserve stands for what the old one
  -- spent.
  -- The reserve is deleted with the lease's other writes, once every
  -- field is read: a lease that fails on another node's corrupt field
  -- must not forget it, or the report, sent again, is charged in full.
  local reserved = stored(st[7], 'p:' .. node, 0)
  local settled = reserved and not behind
  if settled and not (series and k and k ~= series) then
    consumed = math.max(0, consumed - reserved)
  end

  -- Settle the last lease: unspent tokens of a live lease come back; spending
  -- beyond it is debt.
  local prev = stored(st[3], 'l:' .. node, 0) or 0
  local granted = stored(st[4], 'g:' .. node, 0) or 0
  -- A lease to rest on stands until it lapses, but only for reports of
  -- the series it was granted in: a restarted process (another series)
  -- or a report counted as it is (none: a handover after lease shards,
  -- which were charged for the lease already) does not hold what was
  -- spent of it, so none of it comes back.
  local restarted = k and k ~= series
  -- (A granted that is a window number is a sliding window's lease, of
  -- a policy changed since: never live here, resting or not.)
  local restEnd = restsUntil(h, node, interval) -- read first, so that a corrupt t: fails the key whatever else holds
  local live = now - granted <= 2 * interval or (not restarted and granted * 1000 > now and now <= restEnd)
  local carry = 0
  if behind then
    -- Nothing comes back: a live lease stays out beside the new one (the
    -- node may be spending it), settled with it.
    if live then carry = prev end
  elseif consumed < prev then
    if live then
      tokens = math.min(burst, tokens + (prev - consumed))
    end
  else
    tokens = tokens - (consumed - prev)
  end

  -- Tokens out on other nodes' live leases are not in the bucket, but
  -- will be spent or come back: the bucket refills only to what the burst
  -- leaves beside them, or a fleet idle for a while would hold a full
  -- bucket and its outstanding leases at once. At every interval: counted
  -- only while slack was given (an interval at most an eighth of the
  -- window), a fleet syncing every second in bursts (1 s at six times the
  -- limit, 2 s idle) held leases sized to its fading forecasts through
  -- the idle time beside a full bucket, and admitted 118-126% of the
  -- ideal on real Redis (TestLongIntervalBursts; simulator, 8 nodes: 128%
  -- at 1 s, 112% at 500 ms). A lease counted here may be spent already;
  -- the cost is refusals: at 500 ms the simulator's bursts refuse 8% of
  -- what the ideal admits, where the overshoot had hidden 1.5%.
  local most = slackOf(limit, window, interval)
  local grace = steps[#steps - 1] or 0
  local keep = math.max(stale + math.min(window, 100 * interval), grace + 2 * interval)
  local a, silent = fleetOf(key, h, read, node, now, stale, keep, interval, alive, hot)
  local total, count, out = a.D + demand, a.N + 1, a.O
  tokens = math.min(tokens, burst - out)
  tokens = tokens - reserve(key, silent, total, count, equal, rate, interval, now, steps)
  local weight = share(demand, total, count, equal)
  local lease = grantFrom(tokens, demand, weight, burst, count, most, lagOf(limit, window, interval, burst), turnOf(limit, window, interval))
  tokens = clampN(tokens - lease)

  -- A key well under its limit may rest on the node for as long as the
  -- node asked (fleet.Usage.Hold): its lease stands that long, and the
  -- node is counted active until it lapses. Only while what is spent
  -- and this lease come to at most a quarter of the burst (the leases
  -- on loan and the bucket keep three quarters), the resting leases
  -- (the others', a.R, and this one) to at most half, and for a lease
  -- of at most a quarter of the burst's part of each active node: a
  -- node that rests a key does not hear the others take it up, and they
  -- keep a quarter of the burst and the whole rate whatever the resting
  -- nodes do. (Half, not a quarter: parts are sized to the nodes active
  -- when granted, and a fleet whose count moved by one left its last
  -- node without room, so that on a loaded CI four nodes ran 0.59
  -- commands a decision, not 0.007.) A lease beyond that
  -- part, of a node that demands no more, is cut to it if it then
  -- rests: the slack that lets an awake node absorb a burst (slackOf)
  -- took a fifth of the burst a node, so that with two nodes on a key
  -- the bucket kept less than three quarters and no key rested (the
  -- rule was three quarters in the bucket after the grant; the
  -- simulator's zipf: 296 key syncs a second on one node, 10,886 on
  -- two, 60,546 on eight, for 1,000 decisions a second a node).
  local rest = 0
  if hold > 2 * interval and lease > 0 and most > 0 then
    local part = math.floor(burst / (4 * count))
    local cut = lease
    if lease > part and demand <= part then cut = part end
    if cut >= 1 and cut <= part and tokens + lease - cut + out >= burst * 3 / 4 and a.R + cut <= burst / 2 then
      tokens, lease = tokens + lease - cut, cut
      rest = math.min(hold, maxHold * interval)
    end
  end
  -- A resting lease carried beside the new one (a late report) stays
  -- counted as long as it stands; the node is told the new grant's TTL
  -- alone, so that it rests only on a grant that may.
  local ttlLease = math.max(2 * interval, rest)
  if carry > 0 then rest = math.max(rest, restsUntil(h, node, interval) - now) end
  local resting = 0
  if rest > 0 then resting = lease + carry end

  -- When what this lease writes next changes for the others (see nextOf).
  local own = now + stale
  if rest > 0 then own = now + rest elseif lease + carry > 0 then own = now + 2 * interval end
  if settled then redis.call('HDEL', key, 'p:' .. node, 'q:' .. node, 'pw:' .. node) end
  local longest = ttl
  if (a.R or 0) > 0 or resting > 0 then longest = math.huge end
  writeState(h, key, now, ttl, longest, aggregated({'tokens', tokens, 'ts', now, 'b', burst,
    'l:' .. node, lease + carry, 'g:' .. node, now, 'd:' .. node, demand, 's:' .. node, now,
    't:' .. node, rest}, a, demand, lease + carry, resting, own), node, series, upto)

  local reset = 0
  if tokens < burst then reset = math.min(huge, math.ceil((burst - tokens) / rate)) end
  local remaining = math.floor(tokens)
  if remaining < 0 then remaining = 0 end
  return {lease, ttlLease, math.ceil(burst - tokens), remaining, count, math.floor(weight * 1000000), reset, now, 0, 0, 0, 0}
end

`
