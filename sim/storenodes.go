package sim

import (
	istore "github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/partition"
)

// aggregate is the scripts' aggregate of the nodes on a key (see
// fleetOf in global): the nodes as a scan found them at t, by interval
// iv and stale horizon st, with each lease since in place of its node's
// last.
type aggregate struct {
	ok        bool // written: a lease before it scans
	t, iv, st int64
	e         int64 // until when it holds (the scripts' aE)
	demand    float64
	nodes     int
	out       float64 // live leases (token bucket)
	resting   float64 // those of them granted to rest on
}

// counted is the scripts' counted: whether o was active at t by
// interval iv and stale horizon st, its token-bucket lease live then
// (a sliding window's granted is a window number: never live), and
// resting.
func (o *nodeLease) counted(t, st, iv int64) (active, live, rests bool) {
	rest := o.restsUntil(iv)
	active = t-o.seen <= st || t <= rest
	live = active && (t <= rest || o.granted >= t-2*iv)
	return active, live, t <= rest
}

// next is the scripts' nextOf: when what counted says of active o at
// t next changes.
func (o *nodeLease) next(t, st, iv int64) int64 {
	if rest := o.restsUntil(iv); t <= rest {
		return rest
	}
	e := o.seen + st
	if o.granted >= t-2*iv {
		e = min(e, o.granted+2*iv)
	}
	return e
}

type nodeLease struct {
	lease    float64
	granted  int64 // µs (token bucket) or window number (sliding window)
	demand   float64
	seen     int64 // µs
	series   uint64
	total    float64 // the most Total has been in series
	reserved float64 // charged for it while silent
	reckoned float64 // charged or reckoned for it while silent (sliding window: see the scripts' reserve)
	firstAt  int64   // when the window of its first charge began (sliding window)
	ttl      int64   // how long its lease stands if granted to rest on, µs (token bucket); 0 if not
}

// restsUntil is the scripts' restsUntil: until when o's lease stands,
// if granted for longer than two intervals; 0 if not. From when it was
// granted, seen (a sliding window's granted is a window number).
func (o *nodeLease) restsUntil(interval int64) int64 {
	if o.ttl <= 0 {
		return 0
	}
	return o.seen + min(o.ttl, istore.MaxRest(interval))
}

// spentBy is the scripts' spentBy: what a node cut off for e µs may
// have spent on the finite fallback steps, in µs of its share.
func spentBy(e int64, steps []partition.Step) float64 {
	sum, from := 0.0, int64(0)
	for _, st := range steps {
		if st.Until == 0 || e <= from {
			break
		}
		until := st.Until.Microseconds()
		sum += st.Factor * float64(min(e, until)-from)
		from = until
	}
	return sum
}
