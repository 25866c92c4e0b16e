package hybrid

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/internal/clock"
)

// TestStarterToppedUp: a key made before the node knew its fleet gets
// the floor for its starter credit; once a grant (of another key) has
// told the node the fleet's size, the key, still awaiting its first
// grant, may spend its part of the burst as a key made then would (at a
// fleet's start, rounds too long for every new key left keys refused
// under their limit until their first grant: 1,259 of a start's first
// 5 s in BenchmarkFleetManyKeys). Once, and not after a grant.
func TestStarterToppedUp(t *testing.T) {
	t.Parallel()
	l, err := New(Config{Node: "n", Syncer: &bucketFleet{spent: map[string]int64{}}, ManualSync: true,
		Clock: clock.NewManual(time.Unix(1_700_000_000, 0)), Policies: []Policy{{Name: "p", Limit: 400, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	admitted := func(key string, n int) (ok int) {
		for range n {
			d, err := l.Allow(key)
			require.NoError(t, err)
			if d.Allowed() {
				ok++
			}
		}
		return ok
	}
	assert.Equal(t, 1, admitted("k", 5), "the fleet unknown: the floor")
	l.nodesHint.Store(4) // another key's grant: 4 nodes
	assert.Equal(t, 99, admitted("k", 200), "a key made now would have 400 / 4: 99 more")
	assert.Equal(t, 0, admitted("k", 10), "once")
	assert.Equal(t, 100, admitted("new", 200), "as a key made now")
}
