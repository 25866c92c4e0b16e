package global

// leaseSlidingWindowFn defines leaseSlidingWindow, the sliding window's
// lease of one key, of leaseTokenBucket's arguments and reply (see
// leaseTokenBucketFn). It counts a lease in the current window when
// granted; what a node hands back is subtracted from the window it was
// counted in, if that window still weighs.
//
// A node that paces is also leased ahead what the previous window's
// weight frees until two intervals on (never past the window's edge,
// where the lease lapses): the grant is sized against the estimate at
// that time, to, and what it holds beyond the estimate now comes paced,
// released evenly until to. Both ends of the node's spending stay within
// the limit (the lease now, the lease and the paced part at to), and the
// estimate falls linearly between, so the fleet stays within it at every
// moment; what the grant counts in the window includes the paced part in
// full from the start, so no other node is leased it twice.
//
// It follows leaseTokenBucketFn.
const leaseSlidingWindowFn = `
local function leaseSlidingWindow(key, mark, now, node, interval, stale, equal, steps, limit, window, burst, consumed, demand, ttl, rseries, rtotal, paced, alive)
  local marked, _, markLeft = leaseMark(mark, now)
  if marked then return {0, 0, 0, 0, 0, 0, 0, 0, marked, markLeft, 0, 0} end
  local w = math.floor(now / window)
  local h, read = readOwn(key, node)
  local st = {h['w'], h['cur'], h['prev'], h['l:' .. node], h['g:' .. node], h['k:' .. node], h['c:' .. node], h['p:' .. node]}
  local cur, prevc = roll(w, st)
  -- More than a quarter counted before this report: a node resting on
  -- the key that Redis no longer hears is cut off (see scan), as the
  -- token bucket's hot.
  local hot = estimate(cur, prevc, window, now - w * window) > limit / 4
  local k = whole(st[6], 'k:' .. node, 1)
  local series, upto, behind
  consumed, series, upto, behind = once(consumed, rseries, rtotal, k, whole(st[7], 'c:' .. node, 0))
  -- Back from silence: what was reserved for the node was counted as
  -- spent, in the windows it was reserved in, for what it spent past its
  -- last lease (on its ladder); what it reports past that lease is
  -- counted only beyond the reserve, and its lease is settled as any.
  -- Reserved in this window alone (pw: the window of the first charge),
  -- what it did not spend comes back: the window holds its count, not a
  -- worst case. (The token bucket's way, the reserve taken off the whole
  -- report, gave back a lease spent within the window as unspent.)
  local reserved = stored(st[8], 'p:' .. node, 0)
  local settled = reserved and not behind
  local prev = stored(st[4], 'l:' .. node, 0) or 0
  if settled and not (series and k and k ~= series) then
    local beyond = math.max(0, consumed - prev)
    if beyond < reserved and stored(h['pw:' .. node], 'pw:' .. node, 0) == w * window then
      cur = math.max(0, cur - (reserved - beyond))
    end
    consumed = consumed - math.min(beyond, reserved)
  end

  local lw = stored(st[5], 'g:' .. node, 0) or w
  local carry = 0
  if behind then
    -- As the token bucket: a lease counted in this window stays out.
    if lw == w then carry = prev end
  elseif consumed < prev then
    local back = prev - consumed
    if lw == w then
      cur = math.max(0, cur - back)
    elseif lw == w - 1 then
      prevc = math.max(0, prevc - back)
    end
  else
    cur = cur + (consumed - prev)
  end

  -- The nodes Redis no longer hears spend on their ladders: what they
  -- may is counted in the window, as the token bucket charges it to its
  -- bucket (see reserve). Before, the side Redis heard took the whole
  -- limit beside them: 1,466 a second against 1,000 on real Redis with
  -- half the fleet cut off (TestPartialCutOverRedis), the simulator's
  -- partition 48.7% over in its worst window. A node cut off while it
  -- rests is reserved for once the scan finds it not heard (hot).
  local grace = steps[#steps - 1] or 0
  local keep = math.max(stale + math.min(window, 100 * interval), grace + 2 * interval)
  local a, silent = fleetOf(key, h, read, node, now, stale, keep, interval, alive, hot)
  local total, count = a.D + demand, a.N + 1
  cur = clampN(cur + reserve(key, silent, total, count, equal, limit / window, interval, now, steps, w * window, window))

  local elapsed = now - w * window
  local est = estimate(cur, prevc, window, elapsed)
  local avail = limit - est
  if avail < 0 then avail = 0 end

  local weight = share(demand, total, count, equal)
  local most = slackOf(limit, window, interval)
  local turn = turnOf(limit, window, interval)
  local lease = grantFrom(avail, demand, weight, limit, count, most, nil, turn)
  local ahead, aheadFor = 0, 0
  if paced and prevc > 0 then
    local to = math.min(now + 2 * interval, (w + 1) * window)
    local later = limit - estimate(cur, prevc, window, to - w * window)
    if later > avail then
      ahead = grantFrom(later, demand, weight, limit, count, most, nil, turn) - lease
      if ahead > 0 then
        -- Released no faster than the window frees it: by the time the
        -- estimate leaves room for the whole grant, and no later.
        local e = window - (limit - (lease + ahead) - cur) * window / prevc
        aheadFor = math.max(1, math.min(to, math.ceil(w * window + e)) - now)
      else
        ahead = 0
      end
    end
  end
  -- A key under its limit rests on the node, as the token bucket's does
  -- (fleet.Usage.Hold), but never past the window's edge, where its
  -- lease lapses: only while what the window counts and this lease come
  -- to at most three quarters of the limit, and for a lease of at most
  -- a quarter of the limit's part of each active node (cut to it for a
  -- node that demands no more), with no pace. A resting lease is in the
  -- window's count like any other, so the others never lease it twice
  -- (parts are sized to the nodes active when granted, so the resting
  -- leases of nodes that joined one by one may come to more than a
  -- quarter, never past three quarters counted); what resting costs is
  -- that its node does not hear the others take the rest. Three quarters, not the token bucket's quarter: what a window
  -- counts includes the leases out, spent or not, and the slack that
  -- nodes far under the limit hold (slackOf) takes it up to three
  -- quarters, where slack stops (with a quarter, the simulator's zipf on
  -- 8 nodes synced 32,200 keys a second, with three quarters 8,400).
  -- Before, a sliding window never rested: every key synced every
  -- interval (64,600 a second there, 8,000 on one node).
  local rest = 0
  local edge = (w + 1) * window - now
  if hold > 2 * interval and most > 0 and edge > 2 * interval and lease + ahead > 0 then
    local part = math.floor(limit / (4 * count))
    local cut = lease + ahead
    if cut > part and demand <= part then cut = part end
    if cut >= 1 and cut <= part and est + cut <= limit * 3 / 4 then
      lease, ahead, aheadFor = cut, 0, 0
      rest = math.min(hold, maxHold * interval, edge)
    end
  end
  cur = clampN(cur + lease + ahead)

  local own, resting = now + stale, 0 -- when this lease's fields next change for the others (see nextOf)
  if rest > 0 then own, resting = now + rest, lease + ahead + carry end
  if not behind and (reserved or h['q:' .. node] or h['pw:' .. node]) then redis.call('HDEL', key, 'p:' .. node, 'q:' .. node, 'pw:' .. node) end
  writeState(h, key, now, ttl, ttl, aggregated({'w', w, 'cur', cur, 'prev', prevc,
    'l:' .. node, lease + ahead + carry, 'g:' .. node, w, 'd:' .. node, demand, 's:' .. node, now, 't:' .. node, rest}, a, demand, 0, resting, own), node, series, upto)

  local remaining = math.max(0, avail - lease - ahead)
  local reset = 0
  if cur > 0 then reset = (w + 2) * window - now elseif prevc > 0 then reset = (w + 1) * window - now end
  return {lease, math.max(2 * interval, rest), est + lease + ahead, remaining, count, math.floor(weight * 1000000), reset, now, 0, 0, ahead, aheadFor}
end
`
