package gossip_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/local"
)

// window is a sliding window long enough that a count does not fade
// during a test: Used then reads back what was consumed.
var window = fleet.Limit{Algorithm: local.SlidingWindow, Limit: 1000, Window: time.Hour}

func sync(t *testing.T, g *gossip.Gossip, key string, lim fleet.Limit, consumed, demand int64) fleet.Grant {
	t.Helper()
	resp, err := g.Sync(context.Background(), &fleet.Request{
		Interval: 100 * time.Millisecond,
		Keys:     []fleet.Usage{{Key: key, Limit: lim, Consumed: consumed, Demand: demand}},
	})
	require.NoError(t, err)
	require.Len(t, resp.Grants, 1)
	require.NoError(t, resp.Grants[0].Err)
	return resp.Grants[0]
}

func TestIncrementSeenByAll(t *testing.T) {
	t.Parallel()
	c := gossiptest.Start(t, 5, nil)
	sync(t, c.Nodes[0], "k", window, 0, 10)
	start := time.Now()
	sync(t, c.Nodes[0], "k", window, 7, 10)
	for i, g := range c.Nodes[1:] {
		require.Eventually(t, func() bool {
			return sync(t, g, "k", window, 0, 0).Used >= 7
		}, 2*time.Second, 5*time.Millisecond, "node %d never saw the increment", i+2)
	}
	t.Logf("an increment reached all 5 nodes in %v", time.Since(start))
	for _, g := range c.Nodes {
		assert.Len(t, g.Members(), 5)
		assert.Zero(t, g.Stats().Malformed)
	}
}
