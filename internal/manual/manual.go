// Package manual lets the simulator run a hybrid.Limiter's early syncs by
// hand, beside Config.ManualSync's SyncOnce: when a key asks for one, how
// soon after a key's last sync, and the sync itself. They are the
// simulator's hooks, not an API: package hybrid sets them at init, on
// its unexported methods, and a user of ManualSync runs regular syncs
// only.
package manual

import (
	"context"
	"time"
)

// Hooks on a *hybrid.Limiter, passed as l; set by package hybrid.
var (
	// EarlyWanted reports whether a key whose lease runs low has asked
	// for an early sync.
	EarlyWanted func(l any) bool
	// EarlyGap is the least time between two syncs of a key.
	EarlyGap func(l any) time.Duration
	// SyncEarly syncs at once the keys that asked for an early sync.
	SyncEarly func(l any, ctx context.Context) error
)
