package gossip_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// Gossip is a fleet.
var _ fleet.Syncer = (*gossip.Gossip)(nil)

// TestCensusFoundByHybrid checks that a Gossip counts its fleet where
// hybrid looks for a census (store.Of), since the method is not
// Gossip's own: hybrid learns the fleet's size from it before any key
// has synced.
func TestCensusFoundByHybrid(t *testing.T) {
	t.Parallel()
	c := gossiptest.Start(t, 3, nil)
	c.WaitMembers(t, 3, 5*time.Second)
	census, ok := store.Of(c.Nodes[0]).(store.Census)
	require.True(t, ok, "store.Of(*Gossip) has no Census")
	n, err := census.Census(context.Background(), "", 0)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, ok = store.Of((*gossip.Gossip)(nil)).(store.Census)
	require.False(t, ok, "a nil *Gossip counts nothing")
}
