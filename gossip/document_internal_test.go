package gossip

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// lone is a node named name with no peers, closed when the test ends.
func lone(tb testing.TB, name string) *Gossip {
	g, err := New(Config{Name: name, BindAddr: "127.0.0.1"})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = g.Close() })
	return g
}

// held is what g holds, by name.
func (g *Gossip) held() map[string]storedDoc {
	g.docMu.Lock()
	defer g.docMu.Unlock()
	out := make(map[string]storedDoc, len(g.docs))
	for k, v := range g.docs {
		out[k] = v
	}
	return out
}

// TestDocumentMessagesFromPeers: documents as a peer (or anyone holding
// the fleet's key) may send them, over gossip, a stream or a push/pull.
// Every malformed one is counted and changes nothing; a newer version
// replaces the one held and an older or equal one does not; names past
// the eighth are refused and counted.
func TestDocumentMessagesFromPeers(t *testing.T) {
	t.Parallel()
	doc := func(name string, counter uint64, body string) []byte {
		return encodeDocument(name, counter<<tagBits|7, []byte(body))
	}
	good := doc("rules", 5, "five")
	long := doc("rules", 6, "six")
	long = binary.AppendUvarint(long[:len(long)-4], 3) // a body length past the end
	malformed := map[string][]byte{
		"empty name":        doc("", 1, "x"),
		"name of 256 bytes": doc(strings.Repeat("n", 256), 1, "x"),
		"version 0":         encodeDocument("rules", 0, []byte("x")),
		"counter 0":         doc("rules", 0, "x"),
		"the last counter":  doc("rules", maxCounter+1, "x"),
		"max uint64":        encodeDocument("rules", math.MaxUint64, []byte("x")),
		"truncated":         good[:len(good)-1],
		"trailing bytes":    append(bytes.Clone(good), 0),
		"body length wrong": long,
		"body over 256 KiB": doc("rules", 9, strings.Repeat("x", 256<<10+1)),
		"header only":       good[:headerLen],
		"name length huge":  append([]byte{magic, version, kindDocument}, binary.AppendUvarint(nil, 1<<62)...),
		"wrong version":     append([]byte{magic, version + 1}, good[2:]...),
	}
	bundled := map[string][]byte{
		"a bundle in a bundle":   bundle(bundle(good)),
		"no parts":               {magic, version, kindBundle, 0},
		"too many parts":         bundle(good, good, good, good, good, good, good, good, good, good),
		"a part past the end":    append([]byte{magic, version, kindBundle, 1}, binary.AppendUvarint(nil, 1<<40)...),
		"trailing after parts":   append(bundle(good), 7),
		"a malformed part":       bundle(malformed["version 0"]),
		"bundle over the bound":  append(bundle(good), make([]byte, maxBundle)...),
		"only a bundle's header": {magic, version, kindBundle},
	}
	g := lone(t, "n")
	d := (*delegate)(g)
	d.NotifyMsg(good)
	require.Equal(t, map[string]storedDoc{"rules": {v: 5<<tagBits | 7, body: []byte("five")}}, g.held())
	for name, b := range malformed {
		before := g.Stats().Malformed
		d.NotifyMsg(b)
		d.MergeRemoteState(bundle(b), false)
		assert.Equal(t, before+2, g.Stats().Malformed, name)
	}
	for name, b := range bundled {
		before := g.Stats().Malformed
		d.MergeRemoteState(b, false)
		assert.Equal(t, before+1, g.Stats().Malformed, name)
	}
	assert.Equal(t, map[string]storedDoc{"rules": {v: 5<<tagBits | 7, body: []byte("five")}}, g.held(), "nothing malformed was kept")

	d.NotifyMsg(doc("rules", 4, "older"))
	d.MergeRemoteState(bundle(doc("rules", 5, "same version, another body")), false)
	assert.Equal(t, "five", string(g.held()["rules"].body), "an older or equal version changes nothing")
	d.MergeRemoteState(bundle(doc("rules", 7, "seven")), false)
	assert.Equal(t, storedDoc{v: 7<<tagBits | 7, body: []byte("seven")}, g.held()["rules"], "a newer one from a push/pull")

	// The highest version a peer can send: a save after it is refused,
	// never wrapped around below it.
	d.NotifyMsg(doc("rules", maxCounter, "last"))
	require.Equal(t, uint64(maxCounter<<tagBits|7), g.held()["rules"].v)
	_, err := g.Document("rules").Save(t.Context(), []byte("after"), maxCounter<<tagBits|7)
	require.ErrorIs(t, err, fleet.ErrInvalid)
	assert.Equal(t, "last", string(g.held()["rules"].body))

	for i := range 10 {
		d.NotifyMsg(doc(fmt.Sprint("name ", i), 1, "x"))
	}
	assert.Len(t, g.held(), maxDocuments, "names past the eighth refused")
	assert.Equal(t, uint64(3), g.Stats().Refused)
}

// TestPushPullCarriesDocuments: a node's push/pull state is its snapshot
// alone while it holds no document, and a bundle of the snapshot and its
// documents once it does, which a peer merges whole.
func TestPushPullCarriesDocuments(t *testing.T) {
	t.Parallel()
	a, b := lone(t, "a"), lone(t, "b")
	sync := func(g *Gossip) {
		_, err := g.Sync(t.Context(), &fleet.Request{Interval: time.Second, Keys: []fleet.Usage{{Key: "k", Limit: fleet.Limit{Limit: 10, Window: time.Second}, Consumed: 1}}})
		require.NoError(t, err)
	}
	sync(a)
	state := (*delegate)(a).LocalState(false)
	require.Equal(t, byte(kindState), state[2], "no document: the snapshot alone")
	_, err := a.Document("rules").Save(t.Context(), []byte("r"), 0)
	require.NoError(t, err)
	_, err = a.Document("other").Save(t.Context(), []byte("o"), 0)
	require.NoError(t, err)
	state = (*delegate)(a).LocalState(false)
	require.Equal(t, byte(kindBundle), state[2])
	(*delegate)(b).MergeRemoteState(state, true)
	assert.Equal(t, a.held(), b.held())
	assert.Zero(t, b.Stats().Malformed)
	assert.Equal(t, uint64(1), b.Stats().Merges, "the snapshot merged too")
	assert.Equal(t, 1, b.Stats().Keys)

	// A node with documents but no keys: a bundle of its documents only.
	c := lone(t, "c")
	_, err = c.Document("rules").Save(t.Context(), []byte("c"), 0)
	require.NoError(t, err)
	(*delegate)(b).MergeRemoteState((*delegate)(c).LocalState(false), false)
	assert.Zero(t, b.Stats().Malformed)
}

// TestRestartedNodeMakesAnotherVersion: two runs of one node (the same
// name), each saving a document before hearing the fleet, make two
// versions, not one version with two bodies, which the fleet could
// never reconcile.
func TestRestartedNodeMakesAnotherVersion(t *testing.T) {
	t.Parallel()
	a, b := lone(t, "hl-0"), lone(t, "hl-0")
	va, err := a.Document("rules").Save(t.Context(), []byte("old file"), 0)
	require.NoError(t, err)
	vb, err := b.Document("rules").Save(t.Context(), []byte("new file"), 0)
	require.NoError(t, err)
	assert.NotEqual(t, va, vb)
}

// FuzzDocuments: whatever bytes arrive as a message or a push/pull, no
// node panics, holds more than maxDocuments documents or one over
// maxDocument bytes, or sees a document's version go down.
func FuzzDocuments(f *testing.F) {
	f.Add(encodeDocument("rules", 3<<tagBits, []byte("x")), false)
	f.Add(bundle(encodeDocument("rules", 4<<tagBits|9, []byte("y")), encodeDocument("r2", 1<<tagBits, nil)), true)
	f.Add(bundle(Forge(kindState, "p", 2, Forged{Key: "k", Window: time.Second, Stamp: 5000})), true)
	g := lone(f, "n")
	d := (*delegate)(g)
	f.Fuzz(func(t *testing.T, b []byte, pushPull bool) {
		before := g.held()
		if pushPull {
			d.MergeRemoteState(b, false)
		} else {
			d.NotifyMsg(b)
		}
		after := g.held()
		require.LessOrEqual(t, len(after), maxDocuments)
		for name, s := range after {
			require.LessOrEqual(t, len(s.body), maxDocument, name)
			require.GreaterOrEqual(t, s.v, before[name].v, name)
			require.NotZero(t, s.v, name)
		}
	})
}
