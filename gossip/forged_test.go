package gossip

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// The forged-state tests: bytes a member of the fleet, or anyone on an
// unkeyed one, can send about another node. Each arrives through the
// decoder, as it would off the network.

var tb = fleet.Limit{Algorithm: local.TokenBucket, Limit: 1000, Burst: 1000, Window: time.Second}

// swEntry is node's honest entry for key "k" under sw at at.
func swEntry(at instant, cur, seq uint64) entry {
	return peerEntry("k", at, cur, seq)
}

// receive feeds tab the bytes of a one-section message, as decoded off
// the network, and reports whether the decoder took them.
func receive(tab *table, kind byte, origin string, inc uint64, at instant, es ...entry) error {
	var w encoder
	w.header(kind)
	w.section(origin, inc)
	for i := range es {
		w.entry(&es[i])
	}
	var m message
	if err := m.decode(w.finish()); err != nil {
		return err
	}
	tab.merge(&m, at)
	return nil
}

func TestForgedIncarnationTakesNothingOver(t *testing.T) {
	t.Parallel()
	tab := testTable()
	tab.join("b", "")
	require.NoError(t, receive(tab, kindUpdate, "b", 5, t0, swEntry(t0, 900, 10)))
	assert.Equal(t, int64(900), grant(t, tab, "k", 0, 0, t0).Used)
	// A forger names b with a higher incarnation and a clean slate.
	require.NoError(t, receive(tab, kindUpdate, "b", 6, t0, swEntry(t0, 0, 1)))
	assert.Equal(t, int64(900), grant(t, tab, "k", 0, 0, t0).Used, "b's counts stand")
	// b's own next update still counts.
	require.NoError(t, receive(tab, kindUpdate, "b", 5, t0, swEntry(t0, 950, 11)))
	assert.Equal(t, int64(950), grant(t, tab, "k", 0, 0, t0).Used, "b's real updates are heard")
}

func TestForgedFieldsAreBounded(t *testing.T) {
	t.Parallel()
	far := func(e entry) entry { e.stamp = 1 << 53; return e }
	maxStamp := func(e entry) entry { e.stamp, e.windowMs = math.MaxUint64, 2000; return e }
	wideStamp := func(e entry) entry { e.stamp, e.windowMs = 1<<53, 2000; return e }
	tests := []struct {
		name   string
		forge  func(entry) entry
		refuse bool // the decoder or the table refuses it outright
	}{
		{"stamp 2^53", far, true},
		{"stamp just over a window ahead", func(e entry) entry { e.stamp += e.windowMs + 1; return e }, true},
		{"stamp MaxUint64 on another window", maxStamp, true},
		{"stamp 2^53 on another window", wideStamp, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tab := testTable()
			tab.join("b", "")
			require.NoError(t, receive(tab, kindUpdate, "b", 5, t0, swEntry(t0, 900, 10)))
			before := tab.dropped
			err := receive(tab, kindUpdate, "b", 5, t0, tt.forge(swEntry(t0, 0, 11)))
			assert.Equal(t, tt.refuse, err != nil || tab.dropped > before, "refused")
			assert.Equal(t, int64(900), grant(t, tab, "k", 0, 0, t0).Used, "b's counts still count")
			require.NoError(t, receive(tab, kindUpdate, "b", 5, t0, swEntry(t0, 950, 12)))
			assert.Equal(t, int64(950), grant(t, tab, "k", 0, 0, t0).Used, "b's next update counts")
			later := t0.add(2*time.Hour + time.Second)
			require.NoError(t, receive(tab, kindUpdate, "b", 5, later, swEntry(later, 7, 13)))
			tab.gc(later)
			assert.Equal(t, int64(7), grant(t, tab, "k", 0, 0, later).Used, "b's counts in a later window")
		})
	}
}

func TestForgedLeaseLapses(t *testing.T) {
	t.Parallel()
	tab := testTable()
	tab.join("a", "")
	use := func(at instant) fleet.Grant {
		g := tab.sync(&fleet.Usage{Key: "k", Limit: tb, Demand: 100}, 100*time.Millisecond, fleet.Equal, at, false)
		require.NoError(t, g.Err)
		return g
	}
	use(t0)
	forged := entry{hash: xxh3.HashString("k"), windowMs: 1000, stamp: t0.ms(), reserved: 1 << 53, ttlMs: 1 << 32, demand: 1}
	_ = receive(tab, kindState, "made-up", 1, t0, forged)
	g := use(t0.add(time.Second))
	assert.GreaterOrEqual(t, g.Remaining+g.Lease, int64(0))
	later := t0.add(time.Minute)
	tab.join("a", "") // keeps the fleet
	assert.Positive(t, use(later).Lease, "a minute on, the forged lease has lapsed")
}

func TestForgedFarewellIsUndone(t *testing.T) {
	t.Parallel()
	tab := testTable()
	tab.join("b", "")
	require.NoError(t, receive(tab, kindUpdate, "b", 5, t0, swEntry(t0, 1, 1)))
	require.NoError(t, receive(tab, kindLeave, "b", 5, t0))
	assert.Equal(t, 1, tab.sync(&fleet.Usage{Key: "k", Limit: sw, Demand: 10}, 100*time.Millisecond, fleet.Equal, t0, false).Nodes)
	at := t0.add(100 * time.Millisecond)
	require.NoError(t, receive(tab, kindUpdate, "b", 5, at, swEntry(at, 2, 2)))
	g := tab.sync(&fleet.Usage{Key: "k", Limit: sw, Demand: 10}, 100*time.Millisecond, fleet.Equal, at, false)
	assert.Equal(t, 2, g.Nodes, "b's own update says it is here")
	assert.InDelta(t, 0.5, g.Weight, 1e-9, "so it keeps its share")
}

func TestUsedSaturates(t *testing.T) {
	t.Parallel()
	tab := testTable()
	for i := range tab.maxPeers {
		name := fmt.Sprintf("p%d", i)
		tab.join(name, "")
		require.NoError(t, receive(tab, kindUpdate, name, 1, t0, swEntry(t0, maxCount, 1)))
	}
	g := tab.sync(&fleet.Usage{Key: "k", Limit: sw, Demand: 10}, 100*time.Millisecond, fleet.DemandWeighted, t0, false)
	require.NoError(t, g.Err)
	assert.Equal(t, int64(math.MaxInt64), g.Used, "saturated, not wrapped")
	assert.Zero(t, g.Lease)
}

// TestTableIsBounded: forged peers and incarnations cannot grow the
// table past its bound; at the bound new entries are refused and
// counted, entries held still merge, and this node's own keys still
// sync.
func TestTableIsBounded(t *testing.T) {
	t.Parallel()
	tab := testTable()
	tab.maxEntries = 100
	for i := range 50 {
		name := fmt.Sprintf("p%d", i)
		for k := range 4 {
			require.NoError(t, receive(tab, kindUpdate, name, 1, t0, peerEntry(fmt.Sprintf("k%d", k), t0, 1, 1)))
		}
	}
	assert.Equal(t, 100, tab.entries)
	assert.Equal(t, uint64(100), tab.dropped, "what did not fit is counted")
	require.NoError(t, receive(tab, kindUpdate, "p0", 1, t0, peerEntry("k0", t0, 5, 2)))
	assert.Equal(t, int64(5+24), grant(t, tab, "k0", 0, 0, t0).Used, "held entries still merge")
	for inc := range uint64(10) {
		_ = receive(tab, kindUpdate, "p0", inc+2, t0, peerEntry("k9", t0, 1, 1))
	}
	assert.Equal(t, 100, tab.entries)
	g := grant(t, tab, "own", 1, 1, t0)
	assert.Equal(t, int64(1), g.Used, "this node's own key is tracked")
	later := t0.add(3 * time.Hour)
	tab.gc(later)
	assert.Zero(t, tab.entries, "gc gives the room back")
}

func TestIncarnationsPerKeyAreBounded(t *testing.T) {
	t.Parallel()
	tab := testTable()
	for inc := range uint64(100) {
		_ = receive(tab, kindUpdate, "p", inc+1, t0, peerEntry("k", t0, 1, 1))
	}
	assert.Len(t, tab.keys[xxh3.HashString("k")].peers, maxVariants)
}

// BenchmarkForgedPeers measures the heap a table holds after 1,024
// forged peers each send 2,000 keys: the table's bound at work. One op is
// the whole flood.
func BenchmarkForgedPeers(b *testing.B) {
	for range b.N {
		tab := testTable()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var w encoder
		var m message
		for p := range 1024 {
			w.header(kindUpdate)
			w.section(fmt.Sprintf("forged-%d", p), 1)
			for k := range 2000 {
				e := peerEntry("x", t0, 1, 1)
				e.hash = xxh3.HashString(strconv.Itoa(k))
				w.entry(&e)
			}
			if err := m.decode(w.finish()); err != nil {
				b.Fatal(err)
			}
			tab.merge(&m, t0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
		b.ReportMetric(float64(tab.dropped), "refused")
		runtime.KeepAlive(tab)
	}
}

// TestForgedStampIsBounded: a forger who knows b's incarnation (any
// push/pull shows it) sends b's entry stamped ahead of b's own, with a
// lease, demand and weight of its own. b's counts stand either way. A
// stamp more than a window past this node's clock is refused, so b's
// next update, a moment later, is what this node's view shows; one just
// inside the bound holds until b's clock passes it, within a window.
// Before stamps, b's entry carried a sequence number from 1, and a
// forged 2^53 held b's figures for the rest of its run.
func TestForgedStampIsBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		ahead time.Duration // the forged stamp, past t0
		held  time.Duration // how long the forged figures stand
	}{
		{"far future", time.Duration(1<<40) * time.Millisecond, 0},
		{"just past the bound", sw.Window + time.Millisecond, 0},
		{"half a window ahead", sw.Window / 2, sw.Window / 2},
		{"at the bound", sw.Window, sw.Window},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tab := testTable()
			tab.join("b", "")
			require.NoError(t, receive(tab, kindUpdate, "b", 5, t0, swEntry(t0, 900, 10)))
			forged := swEntry(t0, 0, 0)
			forged.stamp += uint64(tt.ahead / time.Millisecond)
			forged.reserved, forged.demand, forged.weight = 1000, 1<<40, weightScale
			require.NoError(t, receive(tab, kindUpdate, "b", 5, t0, forged))
			c := &tab.keys[xxh3.HashString("k")].peers[0]
			figures := func() [3]uint64 { return [3]uint64{c.e.reserved, c.e.demand, uint64(c.e.weight)} }
			honest := func(at instant, cur, demand uint64) {
				e := swEntry(at, cur, 1)
				e.reserved, e.demand = 5, demand
				require.NoError(t, receive(tab, kindUpdate, "b", 5, at, e))
			}

			at, demand := t0.add(100*time.Millisecond), uint64(20)
			honest(at, 950, demand)
			ep, _ := epochOf(t0.wall, c.e.windowMs)
			assert.Equal(t, uint64(950), c.e.countAt(ep), "b's counts stand")
			if tt.held > 0 {
				assert.Equal(t, [3]uint64{1000, 1 << 40, weightScale}, figures(), "within the bound, the forgery holds until b's clock passes it")
				at, demand = t0.add(tt.held+time.Millisecond), 30
				honest(at, 10, demand)
				assert.LessOrEqual(t, tt.held, sw.Window, "no longer than a window")
			}
			assert.Equal(t, [3]uint64{5, demand, weightScale / 2}, figures())
			assert.Equal(t, at.ms()+1, c.e.stamp, "b's own update is what this node's view shows")
			assert.Positive(t, grant(t, tab, "k", 0, 20, at).Lease, "b's real lease of 5, not the forged 1000, is reserved")
		})
	}
}
