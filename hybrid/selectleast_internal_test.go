package hybrid

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzSelectLeast: whatever the keys' needs (a client chooses how much
// each key is offered), selectLeast leaves the m neediest first, and
// every key once.
func FuzzSelectLeast(f *testing.F) {
	f.Add([]byte{3, 1, 2, 2, 0, 9, 9, 1}, uint8(3), uint64(1))
	f.Add([]byte{5, 5, 5, 5, 5, 5}, uint8(2), uint64(2))
	f.Add([]byte{}, uint8(0), uint64(3))
	f.Fuzz(func(t *testing.T, b []byte, m uint8, seed uint64) {
		keys := make([]keyState, len(b)/2)
		s := make([]keyNeed, len(keys))
		for i := range s {
			s[i] = keyNeed{k: &keys[i], group: int(b[2*i] % 3), offered: int64(b[2*i+1] % 4), lastSync: int64(b[2*i+1] / 4)}
		}
		n := min(int(m), len(s))
		want := slices.Clone(s)
		slices.SortFunc(want, func(a, b keyNeed) int { return needier(&a, &b) })
		selectLeast(s, n, needier, rand.New(rand.NewPCG(seed, 0)))
		got := slices.Clone(s[:n])
		slices.SortFunc(got, func(a, b keyNeed) int { return needier(&a, &b) })
		for i := range got {
			require.Zero(t, needier(&got[i], &want[i]), "the %d-th neediest", i)
		}
		seen := map[*keyState]bool{}
		for _, x := range s {
			require.False(t, seen[x.k], "a key twice")
			seen[x.k] = true
		}
		require.Len(t, seen, len(keys))
	})
}
