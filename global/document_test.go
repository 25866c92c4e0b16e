package global_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestDocument: a document saved by one node is loaded by another, with
// a version that only goes up; a save made to an old version stores
// nothing; a load of the version held sends no document.
func TestDocument(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	a, b := newSyncer(t, s.DeadlineClient(t)).Document("rules"), newSyncer(t, s.DeadlineClient(t)).Document("rules")
	ctx := context.Background()
	doc, v, err := b.Load(ctx, 0)
	require.NoError(t, err)
	assert.Nil(t, doc)
	assert.Zero(t, v, "none yet")

	v1, err := a.Save(ctx, []byte("one"), 0)
	require.NoError(t, err)
	assert.Greater(t, v1, uint64(1_700_000_000_000_000), "the first version is Redis's time in µs")
	doc, v, err = b.Load(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, "one", string(doc))
	assert.Equal(t, v1, v)
	doc, v, err = b.Load(ctx, v1)
	require.NoError(t, err)
	assert.Nil(t, doc, "the version held: not sent again")
	assert.Equal(t, v1, v)

	v2, err := b.Save(ctx, []byte("two"), v1)
	require.NoError(t, err)
	got, err := a.Save(ctx, []byte("stale"), v1)
	require.ErrorIs(t, err, fleet.ErrVersion)
	assert.Equal(t, v2, got, "the stored version")
	doc, _, err = a.Load(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, "two", string(doc), "nothing stored")

	_, err = a.Save(ctx, make([]byte, 256<<10+1), v2)
	assert.ErrorIs(t, err, fleet.ErrInvalid)

	// Redis loses it (a FLUSH, a failover to a lagging replica): saved
	// anew, it is above every version before, which nodes take.
	require.NoError(t, s.Client(t).FlushAll(ctx).Err())
	v3, err := a.Save(ctx, []byte("three"), 0)
	require.NoError(t, err)
	assert.Greater(t, v3, v2)
}

// TestDocumentCorrupt: a document hash holding what no script writes
// fails as corrupt, and a document too large is not read.
func TestDocumentCorrupt(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	d := newSyncer(t, s.DeadlineClient(t)).Document("rules")
	ctx := context.Background()
	for _, bad := range []map[string]any{
		{"v": "abc"}, {"v": "-1"}, {"v": "2.5"}, {"v": "1e300"},
		{"v": "3", "doc": strings.Repeat("x", 256<<10+1)},
	} {
		require.NoError(t, c.Del(ctx, "hl:doc:{rules}").Err())
		require.NoError(t, c.HSet(ctx, "hl:doc:{rules}", bad).Err())
		_, _, err := d.Load(ctx, 0)
		assert.ErrorIs(t, err, fleet.ErrCorrupt, "%.40v", bad)
	}
	require.NoError(t, c.Set(ctx, "hl:doc:{rules}", "a string", 0).Err())
	_, _, err := d.Load(ctx, 0)
	assert.Error(t, err, "a key of another type")
}
