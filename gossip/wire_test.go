package gossip

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sample(h uint64) entry {
	return entry{hash: h, windowMs: 1000, stamp: 1_763_900_000_009, epoch: 1_763_900_000, cur: 42, prev: 7,
		reserved: 20, ttlMs: 200, demand: 400, weight: 13107}
}

func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		kind    byte
		origins map[string][]entry
	}{
		{"one entry", kindUpdate, map[string][]entry{"node-1": {sample(1)}}},
		{"many entries", kindUpdate, map[string][]entry{"node-1": {sample(1), sample(2), sample(3)}}},
		{"large values", kindState, map[string][]entry{"n": {{hash: ^uint64(0), windowMs: maxWindowMs, stamp: maxCount,
			epoch: maxCount / maxWindowMs, cur: maxCount, prev: maxCount, reserved: maxCount, ttlMs: maxTTLms, demand: maxCount, weight: 65535}}}},
		{"several origins", kindState, map[string][]entry{"a": {sample(1)}, "b": {sample(2), sample(3)}, "c": {sample(4)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w encoder
			w.header(tt.kind)
			for name, es := range tt.origins {
				w.section(name, 77)
				for i := range es {
					w.entry(&es[i])
				}
			}
			b := w.finish()
			var m message
			require.NoError(t, m.decode(b))
			assert.Equal(t, tt.kind, m.kind)
			got := map[string][]entry{}
			for _, s := range m.sections {
				assert.Equal(t, uint64(77), s.inc)
				got[string(s.name)] = s.entries
			}
			assert.Equal(t, tt.origins, got)
		})
	}
}

// encode returns an update holding e.
func encode(e entry) []byte {
	var w encoder
	w.header(kindUpdate)
	w.section("node-1", 1)
	w.entry(&e)
	return w.finish()
}

func TestWireRejects(t *testing.T) {
	t.Parallel()
	var w encoder
	w.header(kindUpdate)
	w.section("node-1", 1)
	e := sample(1)
	w.entry(&e)
	good := append([]byte(nil), w.finish()...)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"header only", good[:3]},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 0; return b })},
		{"future version", mutate(func(b []byte) []byte { b[1] = version + 1; return b })},
		{"version 1 (epoch and seq)", mutate(func(b []byte) []byte { b[1] = 1; return b })},
		{"unknown kind", mutate(func(b []byte) []byte { b[2] = 9; return b })},
		{"truncated", good[:len(good)-1]},
		{"trailing bytes", append(mutate(func(b []byte) []byte { return b }), 0)},
		{"no origins", []byte{magic, version, kindUpdate, 0}},
		{"huge count", []byte{magic, version, kindUpdate, 1, 1, 'a', 1, 0xff, 0xff, 0x03, 0, 0, 0}},
		{"long name", []byte{magic, version, kindUpdate, 1, 0xff, 0x03, 'a', 'b', 'c'}},
		{"zero window", encode(entry{hash: 1, stamp: 1})},
		{"zero stamp", encode(entry{hash: 1, windowMs: 1})},
		{"stamp before the first window", encode(entry{hash: 1, windowMs: 1000, stamp: 999})},
		{"stamp past the cap", encode(entry{hash: 1, windowMs: 1, stamp: maxCount + 1})},
		{"zero incarnation", []byte{magic, version, kindUpdate, 1, 1, 'a', 0, 0}},
		{"count past the cap", encode(entry{hash: 1, windowMs: 1, stamp: 1, cur: maxCount + 1})},
		{"TTL past the cap", encode(entry{hash: 1, windowMs: 1, stamp: 1, ttlMs: maxTTLms + 1})},
		{"oversized", make([]byte, maxMessage+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var m message
			assert.ErrorIs(t, m.decode(tt.b), errMalformed)
		})
	}
	var m message
	// The count guard rejects before reading: without it the loop would
	// also fail, later, on the first missing entry.
	assert.ErrorContains(t, m.decode([]byte{magic, version, kindUpdate, 1, 1, 'a', 1, 0xff, 0xff, 0x03, 0, 0, 0}), "65535 entries in")
	require.NoError(t, m.decode(good))
}

// FuzzDecode feeds the decoder arbitrary bytes: it must never panic, and
// whatever it accepts must encode back to a message it decodes the same.
func FuzzDecode(f *testing.F) {
	var w encoder
	w.header(kindState)
	w.section("node-1", 5)
	for h := range uint64(3) {
		e := sample(h)
		w.entry(&e)
	}
	w.section("node-2", 6)
	f.Add(append([]byte(nil), w.finish()...))
	f.Add([]byte{magic, version, kindUpdate, 1, 1, 'a', 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m message
		if m.decode(b) != nil {
			return
		}
		var w encoder
		w.header(m.kind)
		for _, s := range m.sections {
			w.section(string(s.name), s.inc)
			for i := range s.entries {
				w.entry(&s.entries[i])
			}
		}
		var again message
		require.NoError(t, again.decode(w.finish()))
		require.Equal(t, len(m.sections), len(again.sections))
		for i := range m.sections {
			require.Equal(t, m.sections[i].entries, again.sections[i].entries)
		}
	})
}
