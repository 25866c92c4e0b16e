package gossip_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// held waits until every node holds version v of the document name with
// body, failing after within, and returns how long that took.
func held(t *testing.T, nodes []*gossip.Gossip, name string, v uint64, body string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for i, g := range nodes {
		require.Eventually(t, func() bool {
			doc, got, err := g.Document(name).Load(t.Context(), 0)
			return err == nil && got == v && string(doc) == body
		}, within-time.Since(start), 5*time.Millisecond, "node %d holds version %d", i+1, v)
	}
	return time.Since(start)
}

// TestDocument: four real memberlist nodes share a document. A save on
// one is held by every other within a second (it goes by stream at
// once); a save made to an old version is refused; two saves made at
// once to the same version, on two nodes cut off from each other, leave
// the whole fleet on the higher one after the cut heals; and
// a node that starts later holds the document as soon as it has joined
// (its join's push/pull carries it).
func TestDocument(t *testing.T) {
	t.Parallel()
	c := gossiptest.Start(t, 4, func(_ int, cfg *gossip.Config) { cfg.Tune = fastPushPull })
	ctx := context.Background()
	a, b := c.Nodes[0].Document("rules"), c.Nodes[1].Document("rules")

	doc, v, err := b.Load(ctx, 0)
	require.NoError(t, err)
	assert.Nil(t, doc)
	assert.Zero(t, v, "none yet")

	v1, err := a.Save(ctx, []byte("one"), 0)
	require.NoError(t, err)
	took := held(t, c.Nodes, "rules", v1, "one", time.Second)
	t.Logf("a save reached all 4 nodes in %v", took)
	doc, v, err = b.Load(ctx, v1)
	require.NoError(t, err)
	assert.Nil(t, doc, "the version held: not returned again")
	assert.Equal(t, v1, v)

	v2, err := b.Save(ctx, []byte("two"), v1)
	require.NoError(t, err)
	assert.Greater(t, v2, v1)
	held(t, c.Nodes, "rules", v2, "two", time.Second)
	got, err := a.Save(ctx, []byte("stale"), v1)
	require.ErrorIs(t, err, fleet.ErrVersion, "made to the version before")
	assert.Equal(t, v2, got, "the version held is returned")

	// Two saves to v2 at once, on nodes that have not heard each other's.
	c.Partition([]int{0}, []int{1})
	va, errA := a.Save(ctx, []byte("from a"), v2)
	vb, errB := b.Save(ctx, []byte("from b"), v2)
	require.NoError(t, errA)
	require.NoError(t, errB)
	require.NotEqual(t, va, vb, "two nodes never make the same version")
	c.Heal()
	win, body := max(va, vb), map[uint64]string{va: "from a", vb: "from b"}[max(va, vb)]
	held(t, c.Nodes, "rules", win, body, 10*time.Second) // by push/pull, every 200 ms

	late, err := gossip.New(gossip.Config{
		Name: "late", BindAddr: "127.0.0.1", Seeds: []string{c.Nodes[2].Addr()}, Tune: gossiptest.Patient,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, late.Close()) }()
	doc, v, err = late.Document("rules").Load(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, win, v, "held as New returns: the join's push/pull carried it")
	assert.Equal(t, body, string(doc))
}

// TestDocumentSpreadsFromAPushPull: a node cut off from the fleet saves
// a document three times; when it joins, the member it joined through
// takes its version from the push/pull and sends it on, so that every
// node holds it although the saves' own streams reached nobody.
func TestDocumentSpreadsFromAPushPull(t *testing.T) {
	t.Parallel()
	c := gossiptest.Start(t, 3, nil)
	ctx := context.Background()
	v1, err := c.Nodes[0].Document("rules").Save(ctx, []byte("fleet"), 0)
	require.NoError(t, err)
	held(t, c.Nodes, "rules", v1, "fleet", time.Second)

	alone, err := gossip.New(gossip.Config{Name: "alone", BindAddr: "127.0.0.1", Tune: gossiptest.Patient})
	require.NoError(t, err)
	defer func() { require.NoError(t, alone.Close()) }()
	d := alone.Document("rules")
	var v uint64
	for i := range 3 {
		v, err = d.Save(ctx, fmt.Appendf(nil, "alone %d", i), v)
		require.NoError(t, err)
	}
	require.Greater(t, v, v1)
	_, err = alone.Join(c.Nodes[2].Addr())
	require.NoError(t, err)
	took := held(t, append(c.Nodes, alone), "rules", v, "alone 2", 2*time.Second)
	t.Logf("a version learnt from a push/pull reached all 4 nodes in %v", took)
}

// TestDocumentRefusals: what Save refuses, and that it never blocks on a
// closed node.
func TestDocumentRefusals(t *testing.T) {
	t.Parallel()
	g, err := gossip.New(gossip.Config{Name: "n", BindAddr: "127.0.0.1"})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = g.Document("rules").Save(ctx, make([]byte, 256<<10+1), 0)
	require.ErrorIs(t, err, fleet.ErrInvalid)
	_, err = g.Document("").Save(ctx, nil, 0)
	require.ErrorIs(t, err, fleet.ErrInvalid)
	_, err = g.Document(strings.Repeat("n", 256)).Save(ctx, nil, 0)
	require.ErrorIs(t, err, fleet.ErrInvalid)
	for i := range 8 {
		_, err = g.Document(fmt.Sprint(i)).Save(ctx, []byte("x"), 0)
		require.NoError(t, err)
	}
	_, err = g.Document("ninth").Save(ctx, []byte("x"), 0)
	require.ErrorIs(t, err, fleet.ErrInvalid, "a ninth document")
	require.NoError(t, g.Close())
	done := make(chan error, 1)
	go func() {
		_, err := g.Document("0").Save(ctx, []byte("y"), 1)
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Save on a closed node blocked")
	}
}

// fastPushPull makes memberlist push/pull every 200 ms.
func fastPushPull(c *memberlist.Config) {
	gossiptest.Patient(c)
	c.PushPullInterval = 200 * time.Millisecond
}

// TestDocumentHealsACut: a node cut off while a save went out gets it
// from a push/pull after the cut heals.
func TestDocumentHealsACut(t *testing.T) {
	t.Parallel()
	c := gossiptest.Start(t, 3, func(_ int, cfg *gossip.Config) { cfg.Tune = fastPushPull })
	ctx := context.Background()
	c.Partition([]int{2})
	v, err := c.Nodes[0].Document("rules").Save(ctx, []byte("while cut"), 0)
	require.NoError(t, err)
	held(t, c.Nodes[:2], "rules", v, "while cut", time.Second)
	time.Sleep(300 * time.Millisecond)
	_, got, err := c.Nodes[2].Document("rules").Load(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, got, "the cut node did not hear the save")
	c.Heal()
	took := held(t, c.Nodes, "rules", v, "while cut", 10*time.Second)
	t.Logf("after the heal, the cut node held the document in %v", took)
}
