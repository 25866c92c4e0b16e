package hybrid

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// pacedKey is a Hybrid sliding window key, as the hot path sees it.
func pacedKey() *keyState {
	k := &keyState{}
	k.pol.Store(&policy{paced: true, limit: fleet.Limit{Algorithm: local.SlidingWindow, Limit: 1000, Window: time.Second}})
	return k
}

// takeAll takes one at a time at now until the key refuses, and returns
// how many it took.
func takeAll(k *keyState, now int64) int64 { return takeN(k, now, math.MaxInt64) }

// takeN takes one at a time at now, up to n, and returns how many it
// took.
func takeN(k *keyState, now, n int64) int64 {
	took := int64(0)
	for ; took < n; took++ {
		if _, _, ok := k.takePaced(now, 1); !ok {
			break
		}
	}
	return took
}

// TestPacedRelease checks that a paced lease's allowance is spendable as
// the pace releases it, not before: the lease at once, the paced part
// evenly over its span; that what the round trip spent comes out of the
// lease first, then out of the pace; and that a grant with no pace, or a
// Cancel, is spendable at once.
func TestPacedRelease(t *testing.T) {
	t.Parallel()
	k := pacedKey()
	k.grantPaced(0, 10, 100, 100*time.Nanosecond, 0, 0, math.MaxInt64, 0)
	assert.Equal(t, int64(10), takeAll(k, 0), "the lease at once")
	assert.Equal(t, int64(50), takeAll(k, 50), "half the pace half way")
	left, unpaced, ok := k.takePaced(50, 1)
	assert.False(t, ok)
	assert.Equal(t, int64(0), left)
	assert.Equal(t, int64(50), unpaced, "the rest is still the lease's")
	assert.Equal(t, int64(50), takeAll(k, 100), "the rest at the end")
	assert.Equal(t, int64(0), takeAll(k, 1000))

	// 30 spent during the round trip: 10 of the lease, 20 of the pace.
	k = pacedKey()
	k.word.Store(uint64(30) << 32)
	k.grantPaced(0, 10, 100, 100*time.Nanosecond, 0, 0, math.MaxInt64, 0)
	assert.Equal(t, int64(0), takeAll(k, 20), "the round trip spent what the pace released by now")
	assert.Equal(t, int64(10), takeAll(k, 30))

	k.give(5)
	assert.Equal(t, int64(5), takeAll(k, 30), "a Cancel's give-back at once")

	k.grantPaced(spentOf(k.word.Load()), 7, 0, 0, 30, 0, math.MaxInt64, 0)
	assert.Equal(t, int64(7), takeAll(k, 30), "no pace: the lease at once")
	assert.False(t, k.pace.pacing(30))
}

// TestEndPace checks that a key striped while its lease is paced moves
// only what the pace released to its stripes.
func TestEndPace(t *testing.T) {
	t.Parallel()
	k := pacedKey()
	k.grantPaced(0, 10, 100, 100*time.Nanosecond, 0, 0, math.MaxInt64, 0)
	k.endPace(40)
	assert.Equal(t, int64(50), allowanceOf(k.word.Load()), "the lease and what 40 ns released")
	assert.False(t, k.pace.pacing(40))
	assert.Equal(t, int64(50), takeAll(k, 40))
}

// TestPacedTakesRaceGrants checks that a take never matches one grant's
// word with another grant's pace: grants alternate between a lease of 10
// unpaced and 1,000 paced of which 10 are released, while takers spend
// as fast as they can, 1 or 500 at a time. No grant ever holds 500
// spendable, so no take of 500 may be admitted; a take that read the
// unpaced grant's pace and spent the paced grant's word would be (it
// takes them for a moment and refunds them before it admits), and so would
// one that spends a refund given back into a later grant's word.
func TestPacedTakesRaceGrants(t *testing.T) {
	t.Parallel()
	const span, now = 100_000, 1000 // a hundredth released at now
	k := pacedKey()
	var stop atomic.Bool
	var wrong, admitted, sum atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := int64(0); !stop.Load(); i++ {
				n := 1 + 499*(i%2)
				if _, _, ok := k.takePaced(now, n); ok {
					admitted.Add(1)
					sum.Add(n)
					if n > 1 {
						wrong.Add(1)
					}
				}
			}
		})
	}
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 20_000 || admitted.Load() < 1000 && time.Now().Before(deadline); i++ {
		_, raw := k.markSpent()
		if i%2 == 0 {
			k.grantPaced(raw, 0, 1000, span, 0, 0, math.MaxInt64, 0)
		} else {
			k.grantPaced(raw, 10, 0, 0, 0, 0, math.MaxInt64, 0)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("admitted %d takes", admitted.Load())
	assert.Positive(t, admitted.Load())
	assert.Zero(t, wrong.Load(), "takes of 500 admitted")
	spent, _ := k.markSpent()
	assert.Equal(t, sum.Load(), spent, "the key's count is what was admitted, refunds taken off")
}
