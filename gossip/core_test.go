package gossip_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestCore runs two Cores, carrying their updates by hand: what one counts
// the other sees, a malformed message is refused, and a Core whose only
// peer left is cut off.
func TestCore(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	a, err := gossipsim.NewCore("a", 1, gossip.Config{})
	require.NoError(t, err)
	b, err := gossipsim.NewCore("b", 1, gossip.Config{})
	require.NoError(t, err)
	a.Join("b")
	b.Join("a")
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 100, Window: time.Minute}
	req := func(consumed, demand int64) *fleet.Request {
		return &fleet.Request{Node: "x", Interval: 100 * time.Millisecond, Keys: []fleet.Usage{{Key: "k", Limit: lim, Consumed: consumed, Demand: demand}}}
	}

	_, err = a.Sync(req(30, 10), now)
	require.NoError(t, err)
	ups := a.Changed(now)
	require.Len(t, ups, 1, "what the sync changed")
	assert.Empty(t, a.Changed(now), "returned once")
	assert.Empty(t, a.Updates(now), "sent once until it changes or is due for refresh")
	_, err = a.Sync(req(5, 10), now)
	require.NoError(t, err)
	require.Len(t, a.Updates(now), 1, "changed again")
	assert.Empty(t, a.Changed(now), "the walk took it")
	require.NoError(t, b.Receive(ups[0].Msg, now))
	assert.Error(t, b.Receive(ups[0].Msg[:3], now), "malformed")

	resp, err := b.Sync(req(0, 10), now)
	require.NoError(t, err)
	g := resp.Grants[0]
	assert.GreaterOrEqual(t, g.Used, int64(30), "a's consumption, seen by b")
	assert.Equal(t, 2, g.Nodes)

	b.Leave("a", now)
	_, err = b.Sync(req(0, 10), now.Add(time.Second))
	assert.ErrorIs(t, err, fleet.ErrUnreachable)
	_, err = b.Sync(nil, now)
	assert.ErrorIs(t, err, fleet.ErrInvalid)
}
