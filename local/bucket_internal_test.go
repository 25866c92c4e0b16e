package local

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokensMatchesDivision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ limit, burst int64 }{{1, 1}, {3, 7}, {1e9, 1e9}, {7, 1 << 40}, {999_983, 1000}} {
		p := newParams(TokenBucket, tc.limit, 1e9, tc.burst)
		for _, d := range []int64{0, 1, p.t - 1, p.t, p.t + 1, p.tau / 2, p.tau - 1, p.tau} {
			if d < 0 {
				continue
			}
			require.Equal(t, d/p.t, p.tokens(d), "t=%d d=%d", p.t, d)
		}
	}
}
