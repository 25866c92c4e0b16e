package sim

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	istore "github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

// store is the simulator's Redis: one atomic state per key, updated by the
// same lease arithmetic as global's Lua scripts (token bucket and sliding
// window), at the moment a request reaches it. A request leaves its node
// when the node syncs, reaches the store half a round trip later, and its
// answer arrives back after the other half; the event loop moves the
// request along, so the node's Limiter really waits in Sync while the
// virtual clock runs and its traffic goes on.
type store struct {
	keys  map[string]*lease
	heard map[string]int64 // when each node's last call reached the store: global's set of nodes heard (see heard in global/leasenodes.go); nil until one did
	ops   chan *op         // from a node's Sync to the event loop
}

// op is one Sync call in flight.
type op struct {
	node  int
	req   fleet.Request
	resp  *fleet.Response
	err   error
	reply chan struct{}
}

// lease is one key's state, as the Lua scripts keep it in a hash.
type lease struct {
	tokens float64 // token bucket: tokens left (negative: debt)
	ts     int64   // when tokens was computed, µs
	w      int64   // sliding window: the current window number
	cur    float64
	prev   float64
	nodes  map[string]*nodeLease
	until  int64 // when the hash expires, µs: at least ttl past each sync, set to twice ttl when less is left (writeState)
	agg    aggregate
}

// syncer is one node's view of the store.
type syncer struct {
	s    *store
	node int
}

var _ fleet.Syncer = syncer{}

// Sync hands req to the event loop and waits for its answer. The loop
// decides when it reaches the store and when the answer comes back, on
// the virtual clock; ctx's real-time deadline never matters.
func (c syncer) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	o := &op{node: c.node, req: *req, reply: make(chan struct{})}
	o.req.Keys = append([]fleet.Usage(nil), req.Keys...)
	c.s.ops <- o
	<-o.reply
	return o.resp, o.err
}

// apply runs o against the store at now (µs since the epoch).
func (s *store) apply(o *op, now int64) {
	interval := o.req.Interval.Microseconds()
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(o.req.Keys))}
	for i := range o.req.Keys {
		u := &o.req.Keys[i]
		if err := u.Limit.Validate(); err != nil {
			resp.Grants[i].Err = fmt.Errorf("%w: %v", fleet.ErrInvalid, err)
			continue
		}
		if u.Shard != (fleet.Shard{}) { // as the contract asks of a store that splits no key
			resp.Grants[i].Err = fmt.Errorf("%w: key %q: the simulator's store splits no key, so has no shard %v", fleet.ErrInvalid, u.Key, u.Shard)
			continue
		}
		st := s.keys[u.Key]
		hold := min(u.Hold.Microseconds(), istore.MaxRest(interval))
		if u.Hold < 0 || u.Hold/istore.MaxHold > o.req.Interval { // as Redis: see leaseItem
			resp.Grants[i].Err = fmt.Errorf("%w: key %q: Hold is %v; it must be from 0 to %d Intervals", fleet.ErrInvalid, u.Key, u.Hold, istore.MaxHold)
			continue
		}
		keep := hold // a sliding window's rests no longer than its window (see leaseItem)
		if u.Limit.Algorithm != local.TokenBucket {
			keep = 0
		}
		ttl := 2*u.Limit.Window.Microseconds() + 10*interval + keep
		if st == nil || now > st.until { // expired
			st = &lease{nodes: map[string]*nodeLease{}, tokens: math.NaN()}
			s.keys[u.Key] = st
		}
		if st.until-now < ttl { // PEXPIRE
			st.until = now + 2*ttl
		}
		if s.heard == nil {
			s.heard = map[string]int64{}
		}
		s.heard[o.req.Node] = now // a lease batch runs: the node is heard (the store's calls never fail alone, so unheardFor never applies)
		resp.Grants[i] = st.sync(o.req.Node, u, interval, hold, now, o.req.Shares == fleet.Equal, o.req.Fallback, s.heard)
	}
	o.resp = resp
}

// sync is the lease scripts' arithmetic for one key.
func (st *lease) sync(node string, u *fleet.Usage, interval, hold, now int64, equal bool, fallback []partition.Step, heard map[string]int64) fleet.Grant {
	lim := u.Limit
	window := float64(lim.Window.Microseconds())
	burst := float64(lim.Burst)
	if burst == 0 {
		burst = float64(lim.Limit)
	}
	consumed, demand := float64(max(u.Consumed, 0)), float64(max(u.Demand, 0))
	me := st.nodes[node]
	fresh := me == nil
	if fresh {
		me = &nodeLease{}
		st.nodes[node] = me
	}
	prev := me.lease
	// once: a report applied but sent again counts once; one behind its
	// series gives nothing back.
	behind := false
	restarted := u.Series != 0 && me.series != 0 && me.series != u.Series // a new process: nothing it reports was spent while silent
	otherSeries := me.series != 0 && me.series != u.Series                // a resting lease gives nothing back to another series, or none
	if u.Series != 0 {
		total := float64(u.Total)
		if me.series == u.Series {
			behind = total < me.total
			consumed = min(consumed, max(0, total-me.total))
			total = max(total, me.total)
		}
		me.series, me.total = u.Series, total
	}

	// The nodes active on the key, and their demand; stale ones are
	// forgotten, as the script's nodes() does.
	slack, lag, turn := 0.0, 0.0, 0.0 // slackOf, lagOf and turnOf in the scripts
	if 8*interval <= lim.Window.Microseconds() {
		slack = math.Ceil(float64(lim.Limit) * 2 * float64(interval) / window)
		lag = min(math.Floor(float64(lim.Limit)*float64(interval)/(5*window)), math.Floor(burst/40))
	} else {
		t := float64(interval)
		if interval >= lim.Window.Microseconds() {
			t = window / 8
		}
		turn = float64(lim.Limit) * t / window
	}
	stale := 3 * interval
	keep := stale + min(lim.Window.Microseconds(), 100*interval)
	tb := lim.Algorithm == local.TokenBucket
	if n := len(fallback); n > 0 {
		grace := fallback[n-1].Until
		if grace == 0 && n > 1 {
			grace = fallback[n-2].Until
		}
		keep = max(keep, grace.Microseconds()+2*interval)
	}
	// The other nodes, from the aggregate, or a scan once it is an
	// interval old and past what it holds until (the scripts' fleetOf).
	type quiet struct {
		*nodeLease
		last int64 // when last heard, on this key (its lease standing) or another
	}
	var silent []quiet
	a := &st.agg
	rate := float64(lim.Limit) / window
	hot := false // more than a quarter of the burst spent, by the bucket and the leases out as the aggregate last held them
	if tb {
		t := burst
		if !math.IsNaN(st.tokens) {
			t = min(burst, st.tokens+float64(max(0, now-st.ts))*rate)
		}
		out := 0.0
		if a.ok {
			out = a.out
		}
		hot = t+out < burst*3/4
	} else { // more than a quarter of the limit counted before this report, as the script's
		w := int64(math.Floor(float64(now) / window))
		cur, prev := st.cur, st.prev
		switch {
		case st.w == w-1:
			prev, cur = cur, 0
		case st.w < w-1:
			prev, cur = 0, 0
		}
		at := float64(now) - float64(w)*window
		hot = math.Ceil(prev*(window-at)/window)+cur > float64(lim.Limit)/4
	}
	due := max(a.e, a.t+interval)
	if hot && a.resting > 0 { // resting nodes may be cut off: asked at least every stale horizon (the scripts' fleetOf)
		due = min(due, a.t+max(interval, stale))
	}
	alone := false // no other node recorded at a scan: no aggregate kept
	if !a.ok || now >= due || now < a.t {
		alone = len(st.nodes) == 1
		*a = aggregate{ok: true, t: now, iv: interval, st: stale, e: now + min(istore.MaxRest(interval), math.MaxInt64-now)}
		for n, o := range st.nodes {
			if n == node || o.seen == 0 {
				continue
			}
			rest := o.restsUntil(interval) // resting the key: active, its lease live, until it lapses
			active, live, rests := o.counted(now, stale, interval)
			l := o.lease
			if o.granted*1000 <= now { // a sliding window's (granted a window number): counted in its window, never out
				l = 0
			}
			var at int64 // when heard on any key; 0 if not known
			if t, ok := heard[n]; ok && t <= now && (!active && (o.demand > 0 || l > 0) || active && !live && l > 0 || rests && hot) {
				at = t
			}
			hears := at >= now-stale
			last := max(o.seen, rest-2*interval, at)
			if now-last > keep { // quiet since the lapse, here and on every other key
				delete(st.nodes, n)
				continue
			}
			if rests && hot && at > 0 && !hears { // resting, but cut off: its lease out, reserved for from when last heard (the scripts' scan)
				a.e = min(a.e, now+interval)
				a.out += l
				if o.demand > 0 {
					silent = append(silent, quiet{o, max(o.seen, at)})
				}
				continue
			}
			if !active {
				if o.demand > 0 || l > 0 {
					a.e = min(a.e, now+interval)
					if hears {
						a.out += l // spends only its lease, out until it reports
					} else if o.demand > 0 {
						from := last // reserved for from when last heard, if known (the scripts' scan)
						if at > 0 {
							from = max(o.seen, at)
						}
						silent = append(silent, quiet{o, from}) // kept to settle its lease and reserved, no longer active
					}
				}
				continue
			}
			a.e = min(a.e, o.next(now, stale, interval))
			a.nodes++
			a.demand += o.demand
			if live || hears {
				a.out += l // a lease no longer live, of a node heard: still out
			}
			if rests {
				a.resting += o.lease
			}
		}
	} else if !fresh {
		active, live, rests := me.counted(a.t, a.st, a.iv)
		if active {
			a.demand, a.nodes = max(0, a.demand-me.demand), max(0, a.nodes-1)
		}
		if rests {
			a.resting = max(0, a.resting-me.lease)
		}
		l := me.lease
		if me.granted*1000 <= a.t { // a sliding window's: counted in its window, never out (the scripts' fleetOf)
			l = 0
		}
		if live {
			a.out = max(0, a.out-l)
		}
	}
	total, count, out := demand+a.demand, a.nodes+1, a.out
	weight := 1 / float64(count)
	if !equal && total > 0 {
		weight = demand / total
	}
	grantFrom := func(avail, capacity, lag float64) float64 {
		if avail+lag < 1 || demand <= 0 {
			return 0
		}
		g := math.Ceil(capacity * weight)
		if turn > 0 && avail < capacity/4 { // at most twice its part of its turn's refill (turnOf)
			g = min(g, math.Ceil(2*turn*weight))
		}
		g = min(max(g, 1), demand)
		g = max(g, min(math.Floor(max(0, avail-capacity/4)/float64(count)), slack)) // an equal part of what is free beyond a quarter
		// A token bucket's lease may take its lag ahead of the refill (lagOf in the scripts).
		if g > avail+lag {
			g = math.Floor(avail + lag)
		}
		return g
	}

	// settle: back from silence, a node is charged only beyond its
	// reserve; a sliding window's, reserved in window wstart alone, gets
	// back what it did not spend (refund, out of the window's count), as
	// the scripts do. wstart is -1 for a token bucket.
	settle := func(wstart int64) (refund float64) {
		if me.reserved > 0 && !behind {
			switch {
			case restarted:
			case wstart < 0:
				consumed = max(0, consumed-me.reserved)
			default: // what it spent past its lease against the reserve, as the script
				beyond := max(0, consumed-prev)
				if beyond < me.reserved && me.firstAt == wstart {
					refund = me.reserved - beyond
				}
				consumed -= min(beyond, me.reserved)
			}
			me.reserved = 0
		}
		if !behind {
			me.reckoned, me.firstAt = 0, 0
		}
		return refund
	}
	// reserve is what the silent nodes may spend on their ladders from an
	// interval after they were last heard until the next scan, an interval
	// on, beyond what was reserved for them already, as the script's; for
	// a sliding window (wstart, when its window began; -1 for a token
	// bucket), only since the previous window began, in whole tokens.
	reserve := func(wstart int64, window float64) float64 {
		sd, charged := 0.0, 0.0
		for _, o := range silent {
			sd += o.demand
		}
		for _, o := range silent {
			w := o.demand / (total + sd)
			if equal {
				w = 1 / float64(count+len(silent))
			}
			want := rate * w * spentBy(now-o.last, fallback)
			if wstart < 0 {
				if want > o.reserved {
					charged += want - o.reserved
					o.reserved = want
				}
				continue
			}
			want, from := math.Floor(want), 0.0
			if t := wstart - int64(window); t > o.last {
				from = math.Floor(rate * w * spentBy(t-o.last, fallback))
			}
			if base := max(o.reckoned, from); want > base {
				charged += want - base
				if o.reserved == 0 {
					o.firstAt = wstart
				}
				o.reserved += want - base
			}
			o.reckoned = max(o.reckoned, want)
		}
		return charged
	}
	g := fleet.Grant{TTL: time.Duration(2*interval) * time.Microsecond, Nodes: count, Weight: math.Floor(weight*1e6) / 1e6}
	if lim.Algorithm == local.TokenBucket {
		if math.IsNaN(st.tokens) {
			st.tokens, st.ts = burst, now
		}
		if now > st.ts {
			st.tokens = min(burst, st.tokens+float64(now-st.ts)*rate)
		}
		settle(-1)
		carry := 0.0
		restUntil := me.restsUntil(interval)
		live := now-me.granted <= 2*interval || (!otherSeries && me.granted*1000 > now && now <= restUntil) // a window number: a sliding window's lease, never live here
		if behind {
			if live {
				carry = prev // a live lease stays out beside the new one
			}
		} else if consumed < prev {
			if live {
				st.tokens = min(burst, st.tokens+(prev-consumed))
			}
		} else {
			st.tokens -= consumed - prev
		}
		st.tokens = min(st.tokens, burst-out) // live leases are not in the bucket
		st.tokens -= reserve(-1, 0)
		l := grantFrom(st.tokens, burst, lag)
		st.tokens -= l
		st.ts = now
		me.ttl = 0
		if hold > 2*interval && l > 0 && slack > 0 { // the key rests on the node (see leaseTokenBucket)
			part := math.Floor(burst / float64(4*count))
			cut := l
			if l > part && demand <= part {
				cut = part
			}
			if cut >= 1 && cut <= part && st.tokens+l-cut+out >= burst*3/4 && a.resting+cut <= burst/2 {
				st.tokens, l = st.tokens+l-cut, cut
				me.ttl = min(hold, istore.MaxRest(interval))
			}
		}
		me.lease, me.granted = l+carry, now
		g.TTL = time.Duration(max(2*interval, me.ttl)) * time.Microsecond // the new grant's alone
		if carry > 0 {
			me.ttl = max(me.ttl, restUntil-now) // a resting lease carried stays counted while it stands
		}
		g.Lease, g.Used = int64(l), int64(math.Ceil(burst-st.tokens))
		g.Remaining = max(0, int64(math.Floor(st.tokens)))
		if st.tokens < burst {
			g.ResetAfter = time.Duration(math.Ceil((burst-st.tokens)/rate)) * time.Microsecond
		}
	} else {
		w := int64(math.Floor(float64(now) / window))
		switch {
		case st.w == w-1:
			st.prev, st.cur = st.cur, 0
		case st.w < w-1:
			st.prev, st.cur = 0, 0
		}
		lw := me.granted
		if fresh {
			lw = w
		}
		st.w = w
		st.cur = max(0, st.cur-settle(w*int64(window)))
		carry := 0.0
		if behind {
			if lw == w {
				carry = prev
			}
		} else if consumed < prev {
			back := prev - consumed
			if lw == w {
				st.cur = max(0, st.cur-back)
			} else if lw == w-1 {
				st.prev = max(0, st.prev-back)
			}
		} else {
			st.cur += consumed - prev
		}
		st.cur += reserve(w*int64(window), window) // counted in the window, as the script does
		estimate := func(at float64) float64 {     // at: µs into window w
			return math.Ceil(st.prev*(window-at)/window) + st.cur
		}
		est := estimate(float64(now) - float64(w)*window)
		avail := max(float64(lim.Limit)-est, 0)
		l := grantFrom(avail, float64(lim.Limit), 0)
		paced := 0.0
		if u.Paced && st.prev > 0 { // the script's pacing: leased ahead until to
			to := min(now+2*interval, (w+1)*int64(window))
			if later := float64(lim.Limit) - estimate(float64(to-w*int64(window))); later > avail {
				if paced = grantFrom(later, float64(lim.Limit), 0) - l; paced > 0 {
					e := window - (float64(lim.Limit)-(l+paced)-st.cur)*window/st.prev
					until := min(float64(to), math.Ceil(float64(w)*window+e))
					g.Paced, g.PacedFor = int64(paced), time.Duration(max(1, until-float64(now)))*time.Microsecond
				} else {
					paced = 0
				}
			}
		}
		// The script's rest: never past the window's edge, with the
		// window at most three quarters counted, and no pace.
		me.ttl = 0
		if edge := (w+1)*int64(window) - now; hold > 2*interval && slack > 0 && edge > 2*interval && l+paced > 0 {
			part := math.Floor(float64(lim.Limit) / float64(4*count))
			cut := l + paced
			if cut > part && demand <= part {
				cut = part
			}
			if cut >= 1 && cut <= part && est+cut <= float64(lim.Limit)*3/4 {
				l, paced = cut, 0
				g.Paced, g.PacedFor = 0, 0
				me.ttl = min(hold, istore.MaxRest(interval), edge)
				g.TTL = time.Duration(max(2*interval, me.ttl)) * time.Microsecond
			}
		}
		st.cur += l + paced
		me.lease, me.granted = l+paced+carry, w
		g.Lease, g.Used, g.Remaining = int64(l), int64(est+l+paced), int64(max(0, avail-l-paced))
		switch {
		case st.cur > 0:
			g.ResetAfter = time.Duration(float64(w+2)*window-float64(now)) * time.Microsecond
		case st.prev > 0:
			g.ResetAfter = time.Duration(float64(w+1)*window-float64(now)) * time.Microsecond
		}
	}
	me.demand, me.seen = demand, now
	a.demand, a.nodes = a.demand+demand, a.nodes+1 // this lease in place of its node's last
	own := now + stale                             // when this lease's fields next change for the others
	if !tb && me.ttl > 0 {
		a.resting += me.lease
		own = now + me.ttl
	}
	if tb {
		a.out += me.lease
		if me.ttl > 0 {
			a.resting += me.lease
			own = now + me.ttl
		} else if me.lease > 0 {
			own = now + 2*interval
		}
	}
	a.e = max(a.t, min(a.e, own))
	a.ok = !alone
	return g
}
