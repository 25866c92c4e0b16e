package hybrid

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOldest: the n resting keys synced longest ago, ties by key, in
// that order, after what out holds already.
func TestOldest(t *testing.T) {
	t.Parallel()
	k := func(key string, at int64) *keyState { return &keyState{key: key, lastSync: at} }
	resting := []*keyState{k("e", 5), k("b", 2), k("d", 2), k("a", 9), k("c", 1), k("f", 2)}
	names := func(ks []*keyState) (s []string) {
		for _, k := range ks {
			s = append(s, k.key)
		}
		return s
	}
	for _, c := range []struct {
		n    int
		want []string
	}{
		{1, []string{"x", "c"}},
		{3, []string{"x", "c", "b", "d"}},
		{16, []string{"x", "c", "b", "d", "f", "e", "a"}},
	} {
		assert.Equal(t, c.want, names(oldest([]*keyState{k("x", 0)}, resting, c.n)), "n=%d", c.n)
	}
	assert.Empty(t, oldest(nil, nil, 16))
}
