package local

import (
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
)

func TestHashKeyIsXXHash(t *testing.T) {
	t.Parallel()
	for n := range 80 {
		key := strings.Repeat("\xa5k", n)[:n]
		require.Equal(t, xxhash.Sum64String(key), hashKey(key), "len %d", n)
	}
}

func FuzzHashKey(f *testing.F) {
	for _, s := range []string{"", "a", "user:42", "0123456789abcdef0123456789abcde", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if got, want := hashKey(key), xxhash.Sum64String(key); got != want {
			t.Fatalf("hashKey(%q) = %x, want %x", key, got, want)
		}
	})
}

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
