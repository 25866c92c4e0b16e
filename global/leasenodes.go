package global

// leaseNodes is what a lease knows of the other nodes on its key: their
// count, demand and live leases, from the key's aggregate (fleetOf),
// which a lease at most once an interval rebuilds by reading every node
// (scan; see fleetOf for when). See
// docs/redis.md, "A key on many nodes". It follows leaseCommon.
const leaseNodes = `
-- counted is whether node n, as h holds its fields, was active at T by
-- interval iv and stale horizon st, and whether its token-bucket lease
-- was live then: the scan's rule (see scan), which a lease that does not
-- scan applies to its own node's last fields to take them out of the
-- aggregate. By either algorithm: a sliding window's g is a window
-- number, never live by this rule, so that nodes leasing a key by both
-- (a policy changing across the fleet) keep the token bucket's leases
-- counted out whichever scans.
local function counted(h, n, T, st, iv)
  local seen = stored(h['s:' .. n], 's:' .. n, 0)
  if not seen then return false, false, false end
  local rest = restsUntil(h, n, iv)
  local active = T - seen <= st or T <= rest
  local live = active and (T <= rest or (stored(h['g:' .. n], 'g:' .. n, 0) or 0) >= T - 2 * iv)
  return active, live, T <= rest
end

-- nextOf is when what counted says of active node n, as h holds its
-- fields, at T next changes: its resting lease lapses, its lease stops
-- being live, or it goes stale (and is then silent, or idle). Until
-- then, a scan at T stays true of n.
local function nextOf(h, n, T, st, iv)
  local rest = restsUntil(h, n, iv)
  if T <= rest then return rest end
  local e = (stored(h['s:' .. n], 's:' .. n, 0) or 0) + st
  local g = stored(h['g:' .. n], 'g:' .. n, 0) or 0
  if g >= T - 2 * iv then e = math.min(e, g + 2 * iv) end
  return e
end

-- heardAt is when Redis last heard node n, on any key, as alive holds
-- it: the fleet's sorted set of nodes by when a lease batch of theirs
-- last ran ('' where there is none: a Cluster, whose scripts reach the
-- keys of their slot alone); 0 if not known. A node Redis hears is not on its
-- fallback ladder: a key it leaves unsynced (its rounds too long for its
-- keys, or the key idle) it spends at most the lease it holds, which a
-- scan counts out until the node reports, rather than reserving for it
-- (see scan). (A node whose calls fail for some keys while others go
-- through is not scored for a while: see unheardFor.) A time ahead of
-- now, or a set of another type, was written by no batch at this clock:
-- the node is not believed heard.
local function heardAt(alive, n, now)
  if alive == '' then return 0 end
  local t = redis.pcall('ZSCORE', alive, n)
  if type(t) ~= 'string' then return 0 end
  t = tonumber(t)
  if t == nil or t ~= t or t > now then return 0 end
  return t
end

-- quietNode is the entry scan lists for silent node n, as h holds its
-- fields: seen when last heard, d its demand then, p what was charged
-- for it so far, q what was charged or reckoned (see reserve).
local function quietNode(h, n, seen, d)
  return {n = n, seen = seen, d = d, p = stored(h['p:' .. n], 'p:' .. n, 0) or 0, q = stored(h['q:' .. n], 'q:' .. n, 0) or 0}
end

-- scan reads every node recorded on key (h, from readState) but node,
-- and returns the active ones' total demand, their count, their live
-- token-bucket leases (and those of nodes heard on other keys, see
-- heardAt) and their resting leases, by counted at now; the silent
-- ones: not heard from for stale µs, on this key or any other,
-- demanding something when last heard; and until when all that holds
-- (see nextOf and fleetOf). A node resting the key (its lease granted
-- for longer) is active, and its lease live, until the lease lapses,
-- and quiet from then on, not from its last sync. A node quiet for more
-- than keep µs, on this key and (heardAt) every other, is forgotten:
-- its fields are deleted.
local function scan(h, key, node, now, stale, keep, interval, alive, hot)
  local total, count, out, resting, silent, e = 0, 0, 0, 0, {}, now + maxHold * interval
  for f, v in pairs(h) do
    if string.sub(f, 1, 2) == 's:' then
      local n = string.sub(f, 3)
      if n ~= node then
        local seen = stored(v, f, 0)
        local rest = restsUntil(h, n, interval)
        local active, live, rests = counted(h, n, now, stale, interval)
        local d, l, at = stored(h['d:' .. n], 'd:' .. n, 0) or 0, stored(h['l:' .. n], 'l:' .. n, 0) or 0, 0
        -- A sliding window's lease (g a window number, far below any
        -- time in µs) is counted in its window, never out; resting, it
        -- counts among the resting leases (lr), whose nodes a hot key
        -- asks about (see fleetOf).
        local lr = l
        if (stored(h['g:' .. n], 'g:' .. n, 0) or 0) * 1000 <= now then l = 0 end
        if (not active and (d > 0 or l > 0)) or (active and not live and l > 0) or (rests and hot) then at = heardAt(alive, n, now) end
        local hears = at >= now - stale
        local last = math.max(seen, rest - 2 * interval, at) -- last heard, on this key (its lease standing) or another
        -- A node resting on a key past a quarter of its burst (hot) that
        -- Redis has heard, but not for the stale horizon, is cut off: it
        -- spends its lease and then its fail-static share, on its ladder
        -- from when it was last heard, not from its lease's lapse (a
        -- rest lasts two minutes or more). Its lease stays out, and it is
        -- reserved for as a silent node. (Not known where Redis keeps no
        -- set of the nodes it hears, a Cluster: there the lapse.)
        local cut = rests and hot and at > 0 and not hears
        if now - last > keep then
          redis.call('HDEL', key, 's:' .. n, 'd:' .. n, 'l:' .. n, 'g:' .. n, 'k:' .. n, 'c:' .. n, 'p:' .. n, 'q:' .. n, 'pw:' .. n, 't:' .. n)
        elseif cut then
          e = math.min(e, now + interval) -- reserved for an interval ahead
          out = out + l
          if d > 0 then silent[#silent + 1] = quietNode(h, n, math.max(seen, at), d) end
        elseif active then
          count = count + 1
          total = total + d
          -- A lease no longer live is still out while its node is
          -- heard: a token bucket's lease is spendable until spent.
          if live or hears then out = out + l end -- (live: g a time, so l is as read)
          if rests then resting = resting + lr end
          e = math.min(e, nextOf(h, n, now, stale, interval))
        elseif d > 0 or l > 0 then
          e = math.min(e, now + interval) -- reserved for an interval ahead, or heard now and perhaps not then
          if hears then
            out = out + l
          elseif d > 0 then
            -- Reserved for from when Redis last heard it, if it knows:
            -- a node cut off while it rested spends on its ladder from
            -- then, not from its lease's lapse.
            local from = last
            if at > 0 then from = math.max(seen, at) end
            silent[#silent + 1] = quietNode(h, n, from, d)
          end
        end
      end
    end
  end
  return total, count, out, resting, silent, e
end

-- aggregate is an aggregate field's value, or nil if it is missing or
-- not a whole number in [lo, hi]: the aggregate is derived, so a bad one
-- is scanned again rather than failing the key.
local function aggregate(v, lo, hi)
  local x = tonumber(v)
  if x == nil or x ~= x or x < lo or x > hi or x ~= math.floor(x) then return nil end
  return x
end

-- fleetOf is what the other nodes on key hold, for node's lease at now:
-- their total demand D, count N and live token-bucket leases O, and the
-- silent ones to reserve for. A lease does not read every node
-- (a key shared by 1,000 nodes cost 2-3 ms a lease): the hash keeps an
-- aggregate, the nodes as a scan found them at aT (by interval aI, with
-- staleIntervals of them as the stale horizon), with each lease since
-- in place of its node's last (aD, aN, aO). It holds for an interval,
-- and beyond that until aE: the soonest time, as the scan and each
-- lease since saw them, that a node goes stale, its lease stops being
-- live, or its resting lease lapses (see nextOf), and at most an
-- interval on while a node not active demands something or holds a
-- lease (it is reserved for an interval ahead, or heard now and perhaps
-- not then). A lease scans again from then, or when the aggregate is
-- missing or bad (not a whole number, out of range, a time ahead; an aE
-- whose aX is not aT was left by a scan of a version before aE: it holds
-- for an interval). So a key is scanned at most once an interval, and a
-- key whose nodes rest once their first lease lapses: with 8 nodes on a
-- key, each syncing it every few seconds, every lease scanned, about
-- 110 µs of Redis each (BenchmarkFleetManyKeys). Within its interval the
-- aggregate may lag, as before aE: a node that goes stale still counts,
-- a lease that lapses is still out; beyond it, it is what a scan would
-- find, but for a node's own earlier leases (aE keeps the soonest of
-- them too, so a lease that lapses early is still out until then), and
-- a node the scan found inactive but heard, its lease counted out, whose
-- next lease adds its new one beside it until the next scan, within an
-- interval: the bucket holds back more, never less. Silent nodes are
-- reserved for at scans. An aggregate in range but false (written by no
-- lease) is believed until it lapses, at most maxHold intervals after its
-- aT: as a false tokens would, it may shift shares, hold tokens back, or
-- (live leases too low) lease again what is out.
-- aN stays below 2^31 - 1, the most nodes a reply may count.
local function fleetOf(key, h, read, node, now, stale, keep, interval, alive, hot)
  local a = {T = aggregate(h['aT'], 0, now), iv = aggregate(h['aI'], 1, 1000 * interval),
    N = aggregate(h['aN'], 0, 2147483645), O = aggregate(h['aO'], 0, huge), R = aggregate(h['aR'], 0, huge)}
  a.D = aggregate(h['aD'], 0, (a.N or 0) * maxLimit)
  -- Good until aE, if the scan at aT wrote it (aX names the scan: a
  -- scan by a version before aE leaves another); else an interval.
  local due = (a.T or 0) + interval
  local e = aggregate(h['aE'], a.T or 0, (a.T or 0) + maxHold * interval)
  if e and a.T and aggregate(h['aX'], 0, now) == a.T then due = math.max(due, e) end
  -- Hot, with leases resting (this node's, or others' that may be cut
  -- off: see scan), at most the stale horizon, so that a node cut off
  -- while it rests is found within it.
  if hot and a.T and (a.R or 0) > 0 then due = math.min(due, a.T + math.max(interval, stale)) end
  local silent = {}
  if not (a.T and a.iv and a.D and a.N and a.O and a.R) or now >= due then
    a.D, a.N, a.O, a.R, a.T, a.iv, a.E = 0, 0, 0, 0, now, interval, now + maxHold * interval
    -- A hash that holds no field but those read (a key on one node)
    -- has no other node to scan, and keeps no aggregate (see
    -- aggregated): one kept from other nodes since gone is deleted.
    if redis.call('HLEN', key) > read then
      a.D, a.N, a.O, a.R, silent, a.E = scan(readState(key), key, node, now, stale, keep, interval, alive, hot)
    else
      a.alone = true
      if h['aT'] or h['aI'] or h['aD'] or h['aN'] or h['aO'] or h['aR'] or h['aE'] or h['aX'] then
        redis.call('HDEL', key, 'aT', 'aI', 'aD', 'aN', 'aO', 'aR', 'aE', 'aX')
      end
    end
    return a, silent
  end
  a.E = due
  local active, live, rests = counted(h, node, a.T, staleIntervals * a.iv, a.iv)
  if active then
    a.D = math.max(0, a.D - (stored(h['d:' .. node], 'd:' .. node, 0) or 0))
    a.N = math.max(0, a.N - 1)
  end
  local l = stored(h['l:' .. node], 'l:' .. node, 0) or 0
  if rests then a.R = math.max(0, a.R - l) end
  -- As the scan takes it: a sliding window's lease (g a window number)
  -- is counted in its window, never out, resting or not.
  if (stored(h['g:' .. node], 'g:' .. node, 0) or 0) * 1000 <= a.T then l = 0 end
  if live then a.O = math.max(0, a.O - l) end
  return a, silent
end

-- aggregated adds to f (the fields a lease writes) the aggregate a with
-- node's lease in place of its last: its demand, and lease (0 from a
-- sliding window, whose leases counted does not count live). A key on
-- its node alone keeps none (64 bytes or more of its hash): the next lease finds
-- nothing to scan.
local function aggregated(f, a, demand, lease, resting, own)
  if a.alone then return f end
  local n = #f
  f[n + 1], f[n + 2], f[n + 3], f[n + 4], f[n + 5], f[n + 6] = 'aT', a.T, 'aI', a.iv, 'aD', clampN(a.D + demand)
  f[n + 7], f[n + 8], f[n + 9], f[n + 10] = 'aN', a.N + 1, 'aO', clampN(a.O + lease)
  f[n + 11], f[n + 12] = 'aR', clampN(a.R + resting)
  f[n + 13], f[n + 14], f[n + 15], f[n + 16] = 'aE', math.max(a.T, math.min(a.E, own)), 'aX', a.T
  return f
end
`
