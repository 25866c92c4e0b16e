package hybrid

import (
	"context"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/manual"
)

// The simulator runs early syncs by hand through internal/manual; see
// there.
func init() {
	manual.EarlyWanted = func(l any) bool { return l.(*Limiter).earlyWanted() }
	manual.EarlyGap = func(l any) time.Duration { return time.Duration(l.(*Limiter).earlyGap()) }
	manual.SyncEarly = func(l any, ctx context.Context) error { return l.(*Limiter).syncWaiting(ctx) }
}
