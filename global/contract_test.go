package global_test

import (
	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/store"
)

// Redis implements the fleet contract and every optional interface
// hybrid asks of a store. The assertions live here, not in hybrid,
// which names no backend (so that a program that syncs by gossip links
// no Redis client: TestGossipOnlyLinksNoRedis).
var (
	_ fleet.Syncer              = (*global.Redis)(nil)
	_ store.StrictDecider       = (*global.Redis)(nil)
	_ store.StrictCharger       = (*global.Redis)(nil)
	_ store.ShardDirectory      = (*global.Redis)(nil)
	_ store.LeaseShardDirectory = (*global.Redis)(nil)
	_ store.Census              = (*global.Redis)(nil)
)
