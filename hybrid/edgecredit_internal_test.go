package hybrid

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCrossEdge checks the edge credit's life: nothing before the edge,
// the credit (not what the lapsed lease left) once past it, spendable
// until the next edge, once a grant; the next sync's marks moved back to
// the crossing, so that what the credit spent comes out of its grant.
func TestCrossEdge(t *testing.T) {
	t.Parallel()
	const edge = 100
	k := pacedKey()
	k.grantPaced(0, 10, 0, 0, 0, 0, edge, 4)
	assert.Equal(t, int64(3), takeN(k, 0, 3))
	assert.False(t, k.crossEdge(edge-1), "before the edge")
	require.True(t, k.crossEdge(edge))
	assert.Equal(t, int64(4), allowanceOf(k.word.Load()), "the credit, not the 7 the lease left")
	assert.Equal(t, int64(edge)+int64(time.Second), k.until.Load(), "until the next edge")
	assert.False(t, k.crossEdge(edge+1), "once a grant")
	assert.Equal(t, int64(4), takeAll(k, edge+1))

	m := mark{}
	m.s0, m.raw = k.markSpent()
	require.Equal(t, int64(7), m.s0)
	k.crossedAt(&m, 1)
	assert.Equal(t, int64(3), m.s0, "reports what was spent until the crossing")
	assert.Equal(t, uint32(3), m.raw)

	// The grant counts the credit spent (4) as spent during its round
	// trip, out of its lease.
	k.grantPaced(m.raw, 20, 0, 0, edge+2, 0, math.MaxInt64, 0)
	assert.Equal(t, int64(16), allowanceOf(k.word.Load()))
	k.crossedAt(&m, 1) // the grant ended the crossing
	assert.Equal(t, int64(3), m.s0)
}

// TestCrossedAtKeepsMarks checks the marks crossedAt leaves alone: read
// before the crossing (the grant takes what the credit spent from its
// lease all the same), or when a fleet was told of spending past it.
func TestCrossedAtKeepsMarks(t *testing.T) {
	t.Parallel()
	k := pacedKey()
	k.grantPaced(0, 10, 0, 0, 0, 0, 0, 5)
	takeN(k, 0, 2)
	early := mark{}
	early.s0, early.raw = k.markSpent()
	require.True(t, k.crossEdge(0))
	takeN(k, 0, 1)
	m := early
	k.crossedAt(&m, 1)
	assert.Equal(t, early, m, "marks read before the crossing")

	m = mark{}
	m.s0, m.raw = k.markSpent()
	k.reported[1] = 3
	k.crossedAt(&m, 2)
	assert.Equal(t, int64(3), m.s0, "a fleet told of 3 already")
	k.reported[1] = 0
	k.crossedAt(&m, 2)
	assert.Equal(t, int64(2), m.s0)
}

// TestCrossEdgeRacesGrants has decisions cross edges while the sync loop
// installs grants that lend a credit of 10 past an edge already passed,
// with nothing else to spend. A crossing lends each grant's credit at
// most once, so what is admitted is at most 10 a grant, and the key's
// count is what was admitted.
func TestCrossEdgeRacesGrants(t *testing.T) {
	t.Parallel()
	k := pacedKey()
	var stop atomic.Bool
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if _, _, ok := k.takePaced(0, 1); ok || k.crossEdge(0) {
					if ok {
						admitted.Add(1)
					}
				}
			}
		})
	}
	grants := 0
	deadline := time.Now().Add(2 * time.Second)
	for ; grants < 20_000 || admitted.Load() < 1000 && time.Now().Before(deadline); grants++ {
		m := mark{}
		m.s0, m.raw = k.markSpent()
		k.crossedAt(&m, 1)
		k.grantPaced(m.raw, 0, 0, 0, 0, 0, 0, 10)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("admitted %d over %d grants", admitted.Load(), grants)
	assert.Positive(t, admitted.Load())
	assert.LessOrEqual(t, admitted.Load(), int64(10*grants))
	spent, _ := k.markSpent()
	assert.Equal(t, admitted.Load(), spent)
}
