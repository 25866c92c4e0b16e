package global

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/redisslot"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// Sync runs the leases of many keys in each script call: Redis pays a
// command's dispatch, a script's setup and a TIME once per call, not per
// key (BenchmarkSync: one call per key ran 7 commands and took 19 µs of
// Redis's CPU a key). A script holds Redis for as long as it runs, so a
// call carries at most batchKeys keys; and Redis Cluster runs a script
// only on keys of one hash slot, so there a call carries keys of one
// slot (each key's state shares its slot by its hash tag), and most
// calls one key. A Ring, or any other client, places keys by their own
// hashing: one key a call.

// batchKeys is the most keys one lease batch carries, whatever their
// work (see batchWork). See docs/redis.md for the measurements.
var batchKeys = 48

// A key's lease costs Redis some 12-20 µs, and when it scans the key's
// nodes (at most once an interval, see fleetOf) 0.6-0.75 µs more for each field
// of its state hash, six to eight for each node recorded on the key (a
// scan at every lease, before the aggregate: 24 µs at 1 node, 53 µs at
// 11, 350-380 µs at 101, 4.5 ms at 1,001). So a lease batch counts its
// work in fields scanned,
// keyWork for each key beside its hash's fields, and starts no key once
// it has done batchWork: batchKeys keys of up to three nodes each fit
// (about 1 ms at one node), and a call of heavier keys stops after
// about 1.5-1.8 ms. The keys it did not start are left unanswered and
// untouched, and Sync sends them in another call: a call runs at least
// one key, and starts none past batchWork.
const (
	keyWork   = 30
	batchWork = 2400
)

// leaseArgs is how many of the lease batch's ARGV each key takes.
const leaseArgs = 12

// aliveKeep is how long, in µs, the fleet's set of nodes heard keeps a
// node Redis no longer hears, at least: ten minutes, far beyond a stale
// horizon (three intervals), and longer while a lease may rest longer
// (store.MaxHold intervals), up to aliveMost. A node resting on a key
// whose entry is gone is not known cut off (see scan): it would count
// as active until its lease lapsed.
const (
	aliveKeep = 10 * 60 * 1_000_000
	aliveMost = 24 * 60 * 60 * 1_000_000 // a day: rests longer than that (an Interval past 8.6 s) may outlive an entry
)

// leaseBatch is the lease of many keys, in one script call. KEYS, in
// pairs, are each key's state hash and lease mark. ARGV starts with what
// the keys share: node, interval_us, stale_us, equal ("1": equal shares,
// else demand-weighted), the fleet's set of nodes heard (see heard;
// empty for none), whether to score the node in it ("1"; see
// unheardFor), then the fallback steps (see stepsOf); then leaseArgs
// numbers per key: its algorithm (1 sliding window, else token bucket),
// limit, window_us, burst, consumed, demand, ttl_ms, series, total (see
// once), whether the fallback steps are the key's (0 for a shard, which
// reserves nothing for a silent node), whether the node paces a sliding
// window's lease ("1", see fleet.Usage.Paced), and hold_us
// (fleet.Usage.Hold; 0 for a shard or a sliding window, which never
// rest).
// Redis's TIME is read once, for every key.
//
// It returns one reply per key it ran, in order: its lease's (see
// leaseTokenBucketFn), or an error reply of its own. Once its work reaches
// batchWork it runs no more keys (see keyWork): the reply is shorter,
// and the keys left out are untouched. A key whose state is corrupt, or
// that a command refuses, fails alone: its lease runs under pcall, and
// its error is its reply. (Lua scripts are not transactions: a lease
// reads and checks every field before it writes, but for the fields of
// nodes long gone, deleted as they are read; what a failed key's lease
// wrote before its error stays.) Out of memory it runs no key: the whole
// call answers OOM.
var leaseBatch = redis.NewScript(storedNum + leaseCommon + leaseNodes + slackOf + lagOf + turnOf + tokenRefill + slidingRoll + leaseMarkFn + leaseTokenBucketFn + leaseSlidingWindowFn + redisNow + `
local node, interval, stale, equal = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local alive, score = ARGV[5], ARGV[6] == '1'
local steps, none = stepsOf(7), {}
local at = 8 + #steps
-- Out of memory (maxmemory, noeviction), Redis refuses a script's
-- writes only until its first: after one key's lease wrote (forgetting
-- a node long gone, which Redis allows), every later key's would be
-- taken, and under pcall the batch goes on to them. So the batch asks
-- first, with a write that changes nothing (SETRANGE of nothing creates
-- no key and changes no string; a hash answers WRONGTYPE), and runs no
-- key out of memory.
local oom = redis.pcall('SETRANGE', KEYS[2], 0, '')
if type(oom) == 'table' and oom.err and string.sub(oom.err, 1, 4) == 'OOM ' then return oom end
-- The node is heard (see heard): its time in the fleet's set. Once
-- less than keep is left of the set's expiry, it is renewed to twice
-- that, and nodes not heard for keep are dropped: two commands a call,
-- not four. keep is aliveKeep, or as long as a lease may rest and a
-- stale horizon if longer (a resting node cut off is found so by its
-- entry: see scan), at most aliveMost. Under pcall, and only once the
-- ZADD took: a key of another type (someone else's) is left as it is,
-- and only the reserves' precision suffers, not the batch.
local keep = math.min(math.max(` + strconv.Itoa(aliveKeep) + `, maxHold * interval + stale), ` + strconv.Itoa(aliveMost) + `)
if alive ~= '' and score and type(redis.pcall('ZADD', alive, now, node)) == 'number' then
  local left = redis.pcall('PTTL', alive)
  if type(left) == 'number' and left < keep / 1000 then
    redis.pcall('ZREMRANGEBYSCORE', alive, '-inf', '(' .. string.format('%.0f', now - keep))
    redis.pcall('PEXPIRE', alive, string.format('%.0f', math.ceil(2 * keep / 1000)))
  end
end
local out = {}
for i = 1, #KEYS / 2 do
  if (i - 1) * ` + strconv.Itoa(keyWork) + ` + scanned >= ` + strconv.Itoa(batchWork) + ` then break end
  local lease, st = leaseTokenBucket, steps
  if ARGV[at] == '1' then lease = leaseSlidingWindow end
  hold = tonumber(ARGV[at + 11])
  if ARGV[at + 9] == '0' then st = none end -- a shard
  local ok, r = pcall(lease, KEYS[2 * i - 1], KEYS[2 * i], now, node, interval, stale, equal, st,
    tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]),
    tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6]), tonumber(ARGV[at + 7]), tonumber(ARGV[at + 8]),
    ARGV[at + 10] == '1', alive)
  if not ok then
    -- error() raises a string; a command Redis refuses, a table.
    if type(r) == 'table' and r.err then r = {err = r.err} else r = {err = tostring(r)} end
  end
  out[i] = r
  at = at + ` + strconv.Itoa(leaseArgs) + `
end
return out
`)

// leaseItem is one key's part of a lease batch.
type leaseItem struct {
	i    int    // its Usage's index in the Request
	base string // keyBase
	args [leaseArgs]any
}

// Sync reports req's usage and leases each key's next tokens, in one
// pipelined round trip per Redis node, with many keys a script call.
func (r *Redis) Sync(ctx context.Context, req *fleet.Request) (*fleet.Response, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Node == "" { // the node's lease and demand are kept under its name
		return nil, fmt.Errorf("%w: Request.Node is empty", fleet.ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()

	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	interval := micros(req.Interval)
	items := make([]leaseItem, 0, len(req.Keys))
	for i, u := range req.Keys {
		it, err := r.leaseItem(req.Interval, u)
		if err != nil {
			resp.Grants[i].Err = err
			continue
		}
		it.i = i
		items = append(items, it)
	}
	head := append([]any{req.Node, interval, staleAfter(interval), flagArg(req.Shares == fleet.Equal),
		r.aliveKey(), flagArg(time.Now().UnixMicro() >= r.unheardUntil.Load())}, fallbackArgs(req.Fallback)...)
	failed := func() { // see unheardUntil; the latest deadline stands
		until := time.Now().Add(unheardFor * req.Interval).UnixMicro()
		for t := r.unheardUntil.Load(); t < until && !r.unheardUntil.CompareAndSwap(t, until); t = r.unheardUntil.Load() {
		}
	}
	all := make([]int, len(items))
	for i := range all {
		all[i] = i
	}
	pending := []leftOver{{all, batchKeys, false}}
	bySlot := r.crossSlot.Load()
	for pass := 0; len(pending) > 0; pass++ {
		var groups [][]int
		var grown []bool // groups[j] came from keys left to grow (see leftOver)
		for _, l := range mergeLeft(pending) {
			gs := r.groups(items, l.keys, bySlot, l.most, l.grow)
			groups = append(groups, gs...)
			for range gs {
				grown = append(grown, l.grow)
			}
		}
		calls := make([]scriptCall, len(groups))
		for j, g := range groups {
			calls[j] = batchCall(head, items, g)
		}
		results, err := r.run(ctx, calls)
		if err != nil {
			failed()
			if pass == 0 {
				return nil, err
			}
		}
		var next []leftOver
		for j, g := range groups {
			res := callResult{err: err}
			if err == nil {
				res = results[j]
			}
			if res.err != nil && len(g) > 1 && !bySlot && redis.HasErrorPrefix(res.err, "CROSSSLOT") {
				// A plain client on a Redis in Cluster mode, which
				// refused keys of several slots in one call without
				// running it: from now on, every call carries keys of
				// one slot.
				r.crossSlot.Store(true)
				next = append(next, leftOver{g, batchKeys, false})
				continue
			}
			if res.err != nil {
				failed()
			}
			ran := len(g)
			if res.err == nil {
				ran = len(res.items)
			}
			for k, i := range g[:ran] {
				r.grant(req, &items[i], res, k, resp)
			}
			if ran < len(g) { // not run: over the batch's work
				// One key alone spent the budget: nothing says how
				// heavy the others are, unless it did so again.
				next = append(next, leftOver{g[ran:], ran, ran == 1 && !grown[j]})
			}
		}
		bySlot = r.crossSlot.Load()
		pending = next
	}
	return resp, nil
}

// leftOver is keys, indices of items, that a lease batch did not start,
// and the most keys a call of them is to carry: as many as that batch
// ran before its work budget stopped it. The keys a batch leaves are
// most likely as heavy as those it ran, so each of its calls runs all
// its keys, and the keys left by one pass all go out in the next one:
// sent again 48 a call, they would each run as few, and a pass would
// finish a few keys a call, leaving most of them to yet another round
// trip (TestLeaseBatchRoundTripsBounded: 192 keys of 101 nodes took 16
// round trips).
//
// A batch that ran one key says nothing of the keys it left: all as
// heavy, they are best sent a key a call, but light keys left behind one
// heavy key would then take a call each (480 keys, each 48th of 700
// nodes: 480 script calls). Their calls carry one key, then two, four,
// and so on up to batchKeys (grow): 25 calls then. A batch of those
// that again ran one key alone leaves its keys a key a call, as heavy
// (96 keys of 700 nodes: 72 round trips sent 48 a call, 19 always
// growing, 3 so).
type leftOver struct {
	keys []int
	most int
	grow bool
}

// mergeLeft merges the keys of left that are to go out as many a call,
// so that keys of one slot left by different calls share a call again.
func mergeLeft(left []leftOver) []leftOver {
	var out []leftOver
	type how struct {
		most int
		grow bool
	}
	at := map[how]int{} // -> its place in out
	for _, l := range left {
		j, ok := at[how{l.most, l.grow}]
		if !ok {
			j = len(out)
			at[how{l.most, l.grow}] = j
			out = append(out, leftOver{most: l.most, grow: l.grow})
		}
		out[j].keys = append(out[j].keys, l.keys...)
	}
	return out
}

// grant sets in resp the grant of it, the k-th key of a call that
// answered res.
func (r *Redis) grant(req *fleet.Request, it *leaseItem, res callResult, k int, resp *fleet.Response) {
	g := &resp.Grants[it.i]
	switch {
	case res.err != nil:
		g.Err = res.err
	case res.items[k].err != nil:
		g.Err = res.items[k].err
	default:
		*g, g.Err = r.grantOf(req.Keys[it.i], req.Interval, res.items[k].vals)
	}
}

// groups splits the keys pending, indices of items, into lease batches
// by where the client runs a call (see Sync): any keys together on a
// single Redis, unless bySlot; keys of one slot on a Cluster; one key a
// call on any other client. A batch carries at most most keys, or if
// grow, the first (of a slot) most and each next one twice as many;
// none more than batchKeys.
func (r *Redis) groups(items []leaseItem, pending []int, bySlot bool, most int, grow bool) [][]int {
	most = max(1, min(most, batchKeys))
	var out [][]int
	switch r.cfg.Client.(type) {
	case *redis.ClusterClient:
		bySlot = true
	case *redis.Client:
	default:
		for _, i := range pending {
			out = append(out, []int{i})
		}
		return out
	}
	next := func(n int) int { // the size of the batch after one of n (see leftOver)
		if grow {
			return min(2*n, batchKeys)
		}
		return n
	}
	if !bySlot {
		for size := most; len(pending) > 0; size = next(size) {
			n := min(size, len(pending))
			out = append(out, pending[:n:n])
			pending = pending[n:]
		}
		return out
	}
	type open struct{ at, size int } // a slot's batch in out still open, and its size
	opens := map[int]open{}
	for _, i := range pending {
		slot := redisslot.Of(items[i].base)
		o, ok := opens[slot]
		if !ok || len(out[o.at]) == o.size {
			size := most
			if ok {
				size = next(o.size)
			}
			o = open{len(out), size}
			opens[slot] = o
			out = append(out, make([]int, 0, 1))
		}
		out[o.at] = append(out[o.at], i)
	}
	return out
}

// aliveKey is the fleet's set of nodes heard (see heard in
// leasenodes.go), or "" on a Cluster, where a script reaches only the
// keys of its slot: there a node that leaves a key unsynced is reserved
// for once stale, as before the set.
func (r *Redis) aliveKey() string {
	if _, ok := r.cfg.Client.(*redis.ClusterClient); ok || r.crossSlot.Load() {
		return ""
	}
	return r.cfg.Prefix + "alive"
}

// unheardFor is how many intervals after a call of its Sync failed a
// node does not have Redis score it as heard: the keys of that call
// follow the FailMode, or the ladder (hybrid retries a key cut off
// alone every ten intervals), while the node's other calls reach Redis,
// and the other nodes must reserve for them as for a node cut off.
// Calls of the same Sync sent before the failure was seen, and its
// later passes, may still score the node: it then counts as heard for
// up to the stale horizon after the failure. A Redis shared by several
// nodes of one process stops scoring them all.
const unheardFor = 20

// batchCall is the lease batch's call for the keys g of items, after the
// shared arguments head.
func batchCall(head []any, items []leaseItem, g []int) scriptCall {
	c := scriptCall{
		script: leaseBatch,
		keys:   make([]string, 0, 2*len(g)),
		args:   slices.Grow(slices.Clip(head), leaseArgs*len(g)),
		reply:  12,
		batch:  len(g),
	}
	for _, i := range g {
		it := &items[i]
		c.keys = append(c.keys, it.base+"lease", it.base+"lshards")
		c.args = append(c.args, it.args[:]...)
	}
	return c
}

// leaseItem is u's part of a lease batch but for its index. Consumed
// and Demand are counted up to MaxLimit, which the scripts keep exact.
func (r *Redis) leaseItem(iv time.Duration, u fleet.Usage) (leaseItem, error) {
	interval := micros(iv)
	if err := u.Limit.Validate(); err != nil {
		return leaseItem{}, fmt.Errorf("%w: key %q: %v", fleet.ErrInvalid, u.Key, err)
	}
	if u.Consumed < 0 || u.Demand < 0 || u.Total < 0 {
		return leaseItem{}, fmt.Errorf("%w: key %q: Consumed, Demand and Total must not be negative", fleet.ErrInvalid, u.Key)
	}
	if u.Hold < 0 || u.Hold/store.MaxHold > iv { // in ns: 10,000 Intervals of 111,111,111 ns are 1,111,111,110 µs, past 10,000 of 111,111 µs (clamped below)
		return leaseItem{}, fmt.Errorf("%w: key %q: Hold is %v; it must be from 0 to %d Intervals", fleet.ErrInvalid, u.Key, u.Hold, store.MaxHold)
	}
	if u.Series > fleet.MaxLimit || u.Total > fleet.MaxLimit {
		return leaseItem{}, fmt.Errorf("%w: key %q: Series %d and Total %d must be at most MaxLimit (%d): start a new Series", fleet.ErrInvalid, u.Key, u.Series, u.Total, int64(fleet.MaxLimit))
	}
	base, err := r.keyBase(u.Key, u.Shard)
	if err != nil {
		return leaseItem{}, err
	}
	alg, steps := 0, 1
	if u.Limit.Algorithm == local.SlidingWindow {
		alg = 1
	}
	if u.Shard != (fleet.Shard{}) {
		// A node goes quiet on a shard when it leases from another:
		// only silence on the key itself is a partition.
		steps = 0
	}
	window := micros(u.Limit.Window)
	// The state outlives a full refill and a few intervals, and a lease
	// a node rests on, on the key itself (a sliding window's rests no
	// longer than its window: see leaseSlidingWindow).
	hold := min(int64(u.Hold/time.Microsecond), store.MaxRest(interval))
	if u.Shard != (fleet.Shard{}) {
		hold = 0
	}
	keep := hold
	if alg != 0 {
		keep = 0
	}
	ttl := (2*window+10*interval+keep)/1000 + 1
	return leaseItem{base: base, args: [leaseArgs]any{alg, u.Limit.Limit, window, u.Limit.Capacity(),
		min(u.Consumed, fleet.MaxLimit), min(u.Demand, fleet.MaxLimit), ttl, u.Series, u.Total, steps, flagArg(u.Paced), hold}}, nil
}

// fallbackArgs is steps as the lease scripts read them (stepsOf): the
// number of finite steps, then each one's until (µs) and factor. The
// last step, if it lasts for ever, is left out.
func fallbackArgs(steps []partition.Step) []any {
	if n := len(steps); n > 0 && steps[n-1].Until == 0 {
		steps = steps[:n-1]
	}
	args := make([]any, 0, 1+2*len(steps))
	args = append(args, len(steps))
	for _, st := range steps {
		args = append(args, micros(st.Until), st.Factor)
	}
	return args
}

// staleAfter is how long, in microseconds, a node that syncs every
// interval microseconds may go unheard before it stops counting as
// active and its lease is forgotten: three intervals.
func staleAfter(interval int64) int64 { return staleIntervals * interval }

// staleIntervals is how many intervals a node may go unheard on a key
// before it stops counting as active there (see leaseCommon).
const staleIntervals = 3

// flagArg is b as the scripts read a flag: "1" or "0".
func flagArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
