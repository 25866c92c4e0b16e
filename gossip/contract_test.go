package gossip_test

import (
	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// Gossip is a fleet, and counts it: hybrid learns the fleet's size from
// its census before any key has synced.
var (
	_ fleet.Syncer = (*gossip.Gossip)(nil)
	_ store.Census = (*gossip.Gossip)(nil)
)
