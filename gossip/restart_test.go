package gossip_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// TestRestartKeepsTheHeavyNodesWeight restarts a light node under its
// own name, as a StatefulSet's rolling update does, over real memberlist,
// while a heavy node syncs a key beside it: the restarted node's earlier
// incarnation stayed live for up to 3 s and counted beside the new one,
// so the heavy node's weight fell while both did.
func TestRestartKeepsTheHeavyNodesWeight(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a restart over real memberlist")
	}
	lim := fleet.Limit{Limit: 4000, Window: time.Second}
	c := gossiptest.Start(t, 3, nil)
	heavy, light := c.Nodes[0], c.Nodes[1]
	round := func(third *gossip.Gossip) fleet.Grant {
		g := sync(t, heavy, "k", lim, 0, 600)
		sync(t, light, "k", lim, 0, 10)
		if third != nil {
			sync(t, third, "k", lim, 0, 10)
		}
		time.Sleep(100 * time.Millisecond)
		return g
	}
	var steady fleet.Grant
	require.Eventually(t, func() bool { steady = round(c.Nodes[2]); return steady.Nodes == 3 }, 10*time.Second, time.Millisecond)
	for range 10 {
		steady = round(c.Nodes[2])
	}
	require.NoError(t, c.Nodes[2].Close())
	time.Sleep(1200 * time.Millisecond) // memberlist takes the name back after a second
	restarted, err := gossip.New(gossip.Config{Name: "node-3", BindAddr: "127.0.0.1", Seeds: []string{heavy.Addr()}, Tune: gossiptest.Patient})
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Close() })
	least, most := 1.0, 0
	for range 30 {
		g := round(restarted)
		least, most = min(least, g.Weight), max(most, g.Nodes)
	}
	t.Logf("the heavy node's weight: %.3f steady, at least %.3f over the 3 s after the restart; nodes at most %d", steady.Weight, least, most)
	assert.LessOrEqual(t, most, 3, "the restarted node counted once")
	assert.GreaterOrEqual(t, least, steady.Weight-0.05, "the heavy node's weight across the restart")
}
