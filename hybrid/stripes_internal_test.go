package hybrid

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stripedKey is a key striped over c stripes, with the sync loop's marks
// taken.
func stripedKey(c int, allowance int64) *keyState {
	k := &keyState{}
	k.word.Store(uint64(allowance))
	k.split(c)
	k.markSpent()
	return k
}

// spend admits n from stripe i's word directly, as the P of that stripe
// would.
func spend(t *testing.T, k *keyState, i int, n int64) {
	t.Helper()
	_, ok := takeWord(&k.stripes.Load().s[i].word, n)
	require.True(t, ok, "stripe %d holds %d", i, n)
}

// TestGrantFollowsSpending checks that a grant shares the lease out by
// what each stripe spent since the last grant, not since the sync's
// marks: a stripe whose P did all the spending gets nearly all of it.
func TestGrantFollowsSpending(t *testing.T) {
	t.Parallel()
	k := stripedKey(4, 4000)
	spend(t, k, 0, 900)
	k.markSpent()
	k.grant(0, 10_000, 2_500) // nothing spent between the marks and the grant
	set := k.stripes.Load()
	got := make([]int64, 4)
	for i := range got {
		got[i] = allowanceOf(set.s[i].word.Load())
	}
	assert.Equal(t, int64(10_000), got[0]+got[1]+got[2]+got[3], "the whole lease, nothing made or lost")
	assert.Greater(t, got[0], int64(9_900), "the stripe that spent gets most: %v", got)
	assert.InDelta(t, 2_500*got[0]/10_000, set.s[0].low.Load(), 1, "its part of the low-water mark")
	assert.Equal(t, 10_000-got[0], set.s[0].rest.Load(), "what the others hold")
}

// TestBorrowingCredits checks that what a P takes from another stripe
// counts, for the next grant, as its own stripe's demand: the spending
// stays on the lender's word (exact accounting), the credit moves the
// weight.
func TestBorrowingCredits(t *testing.T) {
	t.Parallel()
	k := stripedKey(2, 1000) // 500 each
	set := k.stripes.Load()
	spend(t, k, 0, 500)
	spend(t, k, 1, 400) // taken from stripe 1 by stripe 0's P:
	set.s[0].credit.Add(400)
	set.s[1].credit.Add(-400)
	assert.Equal(t, int64(900), k.spent(), "every admission counted once")
	k.markSpent()
	k.grant(0, 10_000, 0)
	got0, got1 := allowanceOf(set.s[0].word.Load()), allowanceOf(set.s[1].word.Load())
	assert.Equal(t, int64(10_000), got0+got1, "the whole lease, nothing made or lost")
	assert.Greater(t, got0, int64(9_950), "the borrower's stripe gets what it asked for: %d, %d", got0, got1)
}

// TestMulDiv checks the exact a×b/c the grant shares out by, where a×b
// does not fit in 64 bits.
func TestMulDiv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b, c, want int64 }{
		{10, 3, 4, 7},
		{0, 5, 5, 0},
		{math.MaxUint32, math.MaxUint32, math.MaxUint32, math.MaxUint32},
		{math.MaxUint32, math.MaxUint32 - 1, math.MaxUint32, math.MaxUint32 - 1},
		{math.MaxInt64, 1, 2, math.MaxInt64 / 2},
	} {
		assert.Equal(t, tc.want, mulDiv(tc.a, tc.b, tc.c), "%d×%d/%d", tc.a, tc.b, tc.c)
	}
}

// FuzzGrantStriped spends arbitrary amounts from the stripes and the
// key's word between marks and grants, and checks the bookkeeping: what
// the stripes hold after a grant is the lease less what was spent since
// the marks (never negative, never more), and spent adds up across words.
func FuzzGrantStriped(f *testing.F) {
	f.Add(uint8(4), uint32(1000), []byte{0, 10, 1, 200, 3, 7})
	f.Add(uint8(2), uint32(math.MaxUint32), []byte{1, 255, 1, 255, 0, 1})
	f.Fuzz(func(t *testing.T, c uint8, lease32 uint32, ops []byte) {
		stripes := int(c%15) + 2
		lease := min(int64(lease32), maxAllowance)
		k := stripedKey(stripes, lease)
		total := int64(0)
		for len(ops) >= 2 {
			i, n := int(ops[0])%(stripes+1), int64(ops[1])
			ops = ops[2:]
			w := k.wordAt(k.stripes.Load(), i)
			if _, ok := takeWord(w, n); ok {
				total += n
			}
			if n%3 == 0 { // a sync: marks, more spending, then the grant
				_, raw := k.markSpent()
				_, ok := takeWord(w, 1)
				during := int64(0)
				if ok {
					total++
					during = 1
				}
				k.grant(raw, lease, lease/4)
				require.Equal(t, max(0, lease-during), k.allowance(), "after a grant")
			}
		}
		require.Equal(t, total, k.spent(), "spent adds up")
	})
}
