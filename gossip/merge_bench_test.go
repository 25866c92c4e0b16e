package gossip

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// BenchmarkGossipMerge measures merging one remote update, as the merge
// loop does: decode the message, then merge its entry into a table that
// tracks 1,000 keys of 5 nodes. Each op advances the entry, so every
// merge changes the table.
func BenchmarkGossipMerge(b *testing.B) {
	tab := testTable()
	lim := fleet.Limit{Limit: 1000, Window: time.Second}
	for k := range 1000 {
		tab.sync(&fleet.Usage{Key: fmt.Sprintf("key-%d", k), Limit: lim, Demand: 10}, 100*time.Millisecond, fleet.DemandWeighted, t0, false)
		for p := range 4 {
			tab.merge(updateFrom(fmt.Sprintf("node-%d", p), 1, peerEntry(fmt.Sprintf("key-%d", k), t0, 1, 1)), t0)
		}
	}
	benchMerge(b, tab, "node-2", "key-500")
}

// BenchmarkGossipMergePeers is BenchmarkGossipMerge on one key that
// peers nodes use: the cost of finding the sender's entry among the
// key's entries.
func BenchmarkGossipMergePeers(b *testing.B) {
	for _, peers := range []int{4, 64, 256, 1024} {
		b.Run(fmt.Sprintf("peers=%d", peers), func(b *testing.B) {
			tab := testTable()
			tab.maxPeers, tab.maxEntries = 2*peers, 4*peers
			lim := fleet.Limit{Limit: 1000, Window: time.Second}
			tab.sync(&fleet.Usage{Key: "key", Limit: lim, Demand: 10}, 100*time.Millisecond, fleet.DemandWeighted, t0, false)
			for p := range peers {
				tab.merge(updateFrom(fmt.Sprintf("node-%d", p), 1, peerEntry("key", t0, 1, 1)), t0)
			}
			require.Len(b, tab.keys[peerEntry("key", t0, 1, 1).hash].peers, peers)
			benchMerge(b, tab, fmt.Sprintf("node-%d", peers*3/4), "key")
		})
	}
}

// benchMerge measures decoding and merging an update of key from, as
// the merge loop does. Each op advances the entry by a millisecond, as
// a node's stamp advances with its clock (and stays within a window of
// it), so every merge changes the table; an op that changes nothing
// fails the benchmark.
func benchMerge(b *testing.B, tab *table, from, key string) {
	e := peerEntry(key, t0, 1, 1)
	var w encoder
	w.header(kindUpdate)
	w.section(from, 1)
	w.entry(&e)
	msg := append([]byte(nil), w.finish()...)
	var m message
	// The sender's entry stays where it is: no merge here adds one.
	k := tab.keys[e.hash]
	at := slices.IndexFunc(k.peers, func(c count) bool { return c.p.name == from })
	if at < 0 {
		b.Fatalf("no entry of %s for %s", from, key)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := m.decode(msg); err != nil {
			b.Fatal(err)
		}
		now := t0.add(time.Duration(i+2) * time.Millisecond)
		ent := &m.sections[0].entries[0]
		ent.stamp, ent.cur = now.ms(), uint64(i+2)
		ent.epoch = ent.stamp / ent.windowMs
		tab.merge(&m, now)
		if k.peers[at].e.stamp != ent.stamp {
			b.Fatal("the update changed nothing")
		}
	}
}
