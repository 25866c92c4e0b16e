package gossip

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hybridlimit/hybridlimit/global"
)

// BenchmarkGossipMerge measures merging one remote update, as the merge
// loop does: decode the message, then merge its entry into a table that
// tracks 1,000 keys of 5 nodes. Each op advances the entry, so every
// merge changes the table.
func BenchmarkGossipMerge(b *testing.B) {
	tab := testTable()
	lim := global.Limit{Limit: 1000, Window: time.Second}
	for k := range 1000 {
		tab.sync(&global.Usage{Key: fmt.Sprintf("key-%d", k), Limit: lim, Demand: 10}, 100*time.Millisecond, global.DemandWeighted, t0, false)
		for p := range 4 {
			tab.merge(updateFrom(fmt.Sprintf("node-%d", p), 1, peerEntry(fmt.Sprintf("key-%d", k), t0, 1, 1)), t0)
		}
	}
	e := peerEntry("key-500", t0, 1, 1)
	var w encoder
	w.header(kindUpdate)
	w.section("node-2", 1)
	w.entry(&e)
	msg := append([]byte(nil), w.finish()...)
	var m message
	counts := tab.keys[e.hash].peers
	node2 := slices.IndexFunc(counts, func(c count) bool { return c.p.name == "node-2" })
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := m.decode(msg); err != nil {
			b.Fatal(err)
		}
		// A millisecond on per op: the stamp advances with the clock,
		// as a node's does, and stays within a window of it.
		now := t0.add(time.Duration(i+2) * time.Millisecond)
		ent := &m.sections[0].entries[0]
		ent.stamp, ent.cur = now.ms(), uint64(i+2)
		ent.epoch = ent.stamp / ent.windowMs
		tab.merge(&m, now)
		if counts[node2].e.stamp != ent.stamp {
			b.Fatal("the update changed nothing")
		}
	}
}
