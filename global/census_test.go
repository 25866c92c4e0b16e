package global_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestCensus counts the nodes that register within the horizon, each
// once, and forgets those that do not register again in time.
func TestCensus(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r := newSyncer(t, c)
	ctx := context.Background()
	for i, node := range []string{"a", "b", "c", "a", "b"} {
		n, err := r.Census(ctx, node, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, min(i+1, 3), n, "after %s", node)
	}
	ttl, err := c.PTTL(ctx, "hl:nodes").Result()
	require.NoError(t, err)
	assert.InDelta(t, float64(2*time.Minute), float64(ttl), float64(time.Second), "kept for two horizons")

	time.Sleep(60 * time.Millisecond)
	n, err := r.Census(ctx, "d", 50*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a, b and c were not heard within 50 ms")
}

// TestCensusHostile: arguments out of range are refused, and a value at
// the census's key that no node wrote (another type; a count no fleet
// has) is an error, never a count.
func TestCensusHostile(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r := newSyncer(t, c)
	ctx := context.Background()
	for _, tt := range []struct {
		node    string
		horizon time.Duration
	}{{"", time.Second}, {string(make([]byte, 300)), time.Second}, {"a", 0}, {"a", -time.Second}, {"a", time.Microsecond}} {
		_, err := r.Census(ctx, tt.node, tt.horizon)
		require.ErrorIs(t, err, fleet.ErrInvalid, "node of %d bytes, horizon %v", len(tt.node), tt.horizon)
	}

	require.NoError(t, c.Set(ctx, "hl:nodes", "not a set", 0).Err())
	_, err := r.Census(ctx, "a", time.Second)
	require.Error(t, err, "a string at the census's key")

	require.NoError(t, c.Del(ctx, "hl:nodes").Err())
	n, err := r.Census(ctx, "a", time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}
