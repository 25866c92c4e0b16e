package gossip

import (
	"time"

	"github.com/zeebo/xxh3"
)

// Message kinds, for tests that forge messages.
const (
	KindUpdate = kindUpdate
	KindState  = kindState
	KindLeave  = kindLeave
)

// Forged is one entry of a forged message: any values, checked by no one
// but the receiver.
type Forged struct {
	Key                                       string
	Window                                    time.Duration
	Stamp, Cur, Prev, Reserved, TTLms, Demand uint64
	Weight                                    uint16
}

// Incarnation is the node's incarnation, as any push/pull shows it.
func (g *Gossip) Incarnation() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.core.tab.self.inc
}

// Forge encodes a message of kind from origin with the given entries,
// whatever their values.
func Forge(kind byte, origin string, inc uint64, es ...Forged) []byte {
	var w encoder
	w.header(kind)
	w.section(origin, inc)
	for _, f := range es {
		e := entry{hash: xxh3.HashString(f.Key), windowMs: uint64(f.Window / time.Millisecond), stamp: f.Stamp,
			cur: f.Cur, prev: f.Prev, reserved: f.Reserved, ttlMs: f.TTLms, demand: f.Demand, weight: f.Weight}
		w.entry(&e)
	}
	return append([]byte(nil), w.finish()...)
}
