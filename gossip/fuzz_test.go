package gossip

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// fuzzLimits are the policies FuzzMergeSync syncs its key under.
var fuzzLimits = []fleet.Limit{
	{Algorithm: local.TokenBucket, Limit: 1000, Burst: 100, Window: time.Second},
	{Algorithm: local.SlidingWindow, Limit: 1000, Window: time.Second},
}

// fuzzSeed is a state message about key "k" from origin, as a peer
// would send it at t0, with e's fields.
func fuzzSeed(kind byte, origin string, inc uint64, e entry) []byte {
	var w encoder
	w.header(kind)
	w.section(origin, inc)
	w.entry(&e)
	return append([]byte(nil), w.finish()...)
}

// FuzzMergeSync drives whatever the decoder accepts through the table
// end to end: merge, collect garbage, sync, as a node does. Whatever the
// bytes, nothing panics, every grant is one a limiter can use (the
// lease in [0, burst], counts and durations not negative, the weight in
// [0, 1]), and every entry held is in its stamp's window, stamped no
// more than a window past this node's clock.
func FuzzMergeSync(f *testing.F) {
	h := xxh3.HashString("k")
	good := entry{hash: h, windowMs: 1000, stamp: t0.ms() + 3, cur: 10, prev: 5, reserved: 50, ttlMs: 200, demand: 100, weight: weightScale / 2}
	f.Add(fuzzSeed(kindUpdate, "p", 2, good), uint8(0), uint16(100))
	zeroStamp := good
	zeroStamp.stamp = 0
	f.Add(fuzzSeed(kindUpdate, "p", 2, zeroStamp), uint8(1), uint16(100))
	future := good
	future.stamp, future.reserved, future.ttlMs = 1<<53, 1<<53, 1<<32
	f.Add(fuzzSeed(kindState, "q", 3, future), uint8(0), uint16(0))
	future.stamp = math.MaxUint64
	f.Add(fuzzSeed(kindState, "q", 3, future), uint8(0), uint16(0))
	ahead := good // inside the bound: b's figures held for half a window
	ahead.stamp, ahead.demand = t0.ms()+500, 1<<40
	f.Add(fuzzSeed(kindUpdate, "p", 2, ahead), uint8(0), uint16(100))
	f.Add(fuzzSeed(kindLeave, "p", 2, good), uint8(1), uint16(10))
	f.Fuzz(func(t *testing.T, b []byte, which uint8, demand uint16) {
		lim := fuzzLimits[int(which)%len(fuzzLimits)]
		tab := testTable()
		tab.join("p", "")
		burst := lim.Burst
		if lim.Algorithm != local.TokenBucket || burst == 0 {
			burst = lim.Limit
		}
		check := func(g fleet.Grant) {
			require.NoError(t, g.Err)
			require.True(t, g.Lease >= 0 && g.Lease <= burst, "lease %d outside [0, %d]", g.Lease, burst)
			require.GreaterOrEqual(t, g.Used, int64(0))
			require.GreaterOrEqual(t, g.Remaining, int64(0))
			require.GreaterOrEqual(t, g.ResetAfter, time.Duration(0))
			require.True(t, g.Weight >= 0 && g.Weight <= 1, "weight %v outside [0, 1]", g.Weight)
			require.GreaterOrEqual(t, g.Nodes, 1)
		}
		// Every entry held is in its stamp's window, no peer's is
		// stamped more than a window past this node's clock, and the
		// members are counted right whatever farewells came.
		held := func(now instant) {
			members := 0
			for _, p := range tab.peers {
				if p.alive && !p.left {
					members++
				}
			}
			require.Equal(t, members, tab.members, "the members counted (mark), against a recount")
			for _, k := range tab.keys {
				if k.own.stamp != 0 {
					require.Equal(t, k.own.stamp/k.own.windowMs, k.own.epoch, "own entry's window is its stamp's")
				}
				for _, c := range k.peers {
					require.Equal(t, c.e.stamp/c.e.windowMs, c.e.epoch, "a peer entry's window is its stamp's")
					require.LessOrEqual(t, c.e.stamp, now.ms()+c.e.windowMs, "a peer's stamp within a window of ours")
				}
			}
		}
		usage := &fleet.Usage{Key: "k", Limit: lim, Consumed: 3, Demand: int64(demand)}
		check(tab.sync(usage, 100*time.Millisecond, fleet.DemandWeighted, t0, false))
		var m message
		if m.decode(b) != nil {
			return
		}
		now := t0
		for range 3 {
			now = now.add(400 * time.Millisecond)
			tab.merge(&m, now)
			held(now)
			tab.gc(now)
			check(tab.sync(usage, 100*time.Millisecond, fleet.DemandWeighted, now, false))
			check(tab.sync(usage, 100*time.Millisecond, fleet.Equal, now, false))
			held(now)
		}
		tab.leave("p", now)
		held(now)
		now = now.add(time.Hour)
		tab.gc(now)
		held(now)
		check(tab.sync(usage, 100*time.Millisecond, fleet.DemandWeighted, now, false))
	})
}
