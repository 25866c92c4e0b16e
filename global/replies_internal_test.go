package global

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRepliesChecked feeds the reply readers what a script of another
// version, or a store that lies, could answer: each must fail the key
// with ErrCorrupt, never hand the caller a lease or a decision. (The
// scripts' own checks, against a real Redis, are TestCorrupt*.)
func TestRepliesChecked(t *testing.T) {
	t.Parallel()
	r := &Redis{addr: "redis.test:6379"}
	u := Usage{Key: "k", Limit: Limit{Limit: 100, Window: time.Second}, Demand: 50}
	ok := []int64{10, 2000, 40, 60, 1, 1e6, 500, 1, 0, 0}
	g, err := r.grantOf(u, ok)
	require.NoError(t, err)
	assert.Equal(t, Grant{Lease: 10, TTL: 2 * time.Millisecond, Used: 40, Remaining: 60, Nodes: 1, Weight: 1, ResetAfter: 500 * time.Microsecond}, g)

	grants := []struct {
		name string
		i    int
		v    int64
	}{
		{"negative lease", 0, -1},
		{"lease above the demand", 0, 51},
		{"negative ttl", 1, -1},
		{"negative used", 2, -5},
		{"remaining above the burst", 3, 101},
		{"no nodes", 4, 0},
		{"weight above one", 5, 1e6 + 1},
		{"negative reset", 6, math.MinInt64},
		{"zero shards", 8, -1},
		{"one shard", 8, 1},
		{"too many shards", 8, MaxShards + 1},
	}
	for _, tt := range grants {
		v := append([]int64(nil), ok...)
		v[tt.i] = tt.v
		_, err := r.grantOf(u, v)
		assert.ErrorIs(t, err, ErrCorrupt, tt.name)
	}
	marked := append([]int64(nil), ok...)
	marked[8], marked[9] = 4, -1
	_, err = r.grantOf(u, marked)
	assert.ErrorIs(t, err, ErrCorrupt, "a mark lasting less than nothing")

	lim := Limit{Limit: 100, Window: time.Second}
	d, err := r.decisionOf("k", lim, []int64{1, 99, 0, 10})
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true, Remaining: 99, ResetAfter: 10 * time.Microsecond}, d)
	for _, v := range [][]int64{
		{3, 0, 0, 0},     // no such outcome
		{-1, 0, 0, 0},    // nor this
		{2, 0, 0, 1000},  // marked into no shards
		{2, 1, 0, 1000},  // or one
		{2, 4, 0, -1000}, // for less than nothing
		{1, 101, 0, 10},  // more left than the burst
		{0, -1, 5, 10},   // less than nothing left
		{0, 0, -2, 10},   // a retry before now
		{1, 50, 7, 10},   // admitted, yet to retry
		{0, 0, 5, -10},   // a reset before now
	} {
		_, err := r.decisionOf("k", lim, v)
		assert.ErrorIs(t, err, ErrCorrupt, "%v", v)
	}

	for _, v := range [][]int64{{0, 0}, {4, 0}, {4, 1000}} {
		_, _, err := r.markOf("k", v)
		assert.NoError(t, err, "%v", v)
	}
	for _, v := range [][]int64{{0, 1000}, {1, 1000}, {-4, 1000}, {4, -1}, {MaxShards + 1, 0}} {
		_, _, err := r.markOf("k", v)
		assert.ErrorIs(t, err, ErrCorrupt, "%v", v)
	}

	call := scriptCall{keys: []string{"hl:{k}:lease"}, reply: 2}
	for _, v := range []any{"OK", []any{int64(1)}, []any{int64(1), "x"}, []any{int64(1), 2.5}} {
		_, err := r.int64s(call, v)
		assert.ErrorIs(t, err, ErrCorrupt, "%v", v)
	}
	assert.Equal(t, time.Duration(math.MaxInt64), durationOf(math.MaxInt64/1000+1), "saturates")
}
