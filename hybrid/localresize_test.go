package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// TestSetPoliciesKeepsLocalSpent: a Local policy whose limit changes
// (SetPolicies, SetLoadFactor) keeps what its keys spent, as Hybrid and
// Strict policies do: 6 of 10 spent, raised to 20, 14 more. A change
// refused (another policy in it is wrong) changes nothing. Before, a
// Local policy got new buckets, full: 20 more.
func TestSetPoliciesKeepsLocalSpent(t *testing.T) {
	t.Parallel()
	p := hybrid.Policy{Name: "l", Mode: hybrid.Local, Limit: 10, Window: time.Hour}
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{p}})
	require.NoError(t, err)
	defer l.Close()
	take := func(n int) int {
		got := 0
		for range n {
			if d, err := l.Allow("k"); err == nil && d.Allowed() {
				got++
			}
		}
		return got
	}
	require.Equal(t, 6, take(6))
	q := p
	q.Limit = 20
	require.Error(t, l.SetPolicies([]hybrid.Policy{q, {Name: "bad"}}))
	d, err := l.AllowN("k", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(10), d.Limit(), "a refused change changes nothing")
	require.NoError(t, l.SetPolicies([]hybrid.Policy{q}))
	assert.Equal(t, 14, take(30), "6 of 20 spent")
	require.NoError(t, l.SetLoadFactor(0.5))
	assert.Zero(t, take(5), "20 of 10 spent")
	require.NoError(t, l.SetLoadFactor(1))
	assert.Zero(t, take(5), "20 of 20 spent")
}
