package hybrid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestOneSlowSyncIsNotAnOutage: a node 50 ms from Redis (a proxy adding
// 25 ms each way), syncing every 100 ms at the default SyncTimeout, one
// of whose syncs is held past it (the proxy's delay raised to 150 ms for
// 150 ms, as a congested link or a Redis pausing for a fork might). The
// timeout drops the sync's connection, and a sync on a new one takes
// three round trips (dial, handshake, the scripts): 150 ms here. The
// syncs after the slow one must reach Redis again, not each time out in
// turn on a new connection while the node, Healthy, refuses a key far
// under its limit once its lease runs out.
//
// That cascade was seen once, set off by the census's first call (a
// script Redis had not cached) and fixed there (the census has twice
// SyncTimeout); it was thought any slow sync could set it off. Not so
// here: written to show it, this test passed on the code it was written
// against (1 of 17 rounds failed, 0 refused, in 3 of 3 runs alone; 3 of
// 15 under a CI run), the pool having a connection to spare. It stays as
// a guard.
func TestOneSlowSyncIsNotAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a node driven for 3 s")
	}
	t.Parallel()
	srv := redistest.StartServer(t)
	proxy, err := faultnet.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	proxy.SetDelay(25 * time.Millisecond)
	policy := hybrid.Policy{Name: "api", Limit: 1000, Window: time.Second, Burst: 1000}
	l := fleettest.Limiters(t, 1, func(int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: redisVia(t, srv, proxy.Addr(), 0), Interval: 100 * time.Millisecond}
	})
	// A second of 100 a second: the key has synced and holds a lease.
	fleettest.Drive(t, l, "k", []float64{100}, time.Second)
	before := l[0].Stats()
	go func() {
		time.Sleep(200 * time.Millisecond)
		proxy.SetDelay(150 * time.Millisecond)
		time.Sleep(150 * time.Millisecond)
		proxy.SetDelay(25 * time.Millisecond)
	}()
	r := fleettest.Drive(t, l, "k", []float64{100}, 2*time.Second)
	after := l[0].Stats()
	refused := len(r.Offered) - len(r.Admitted)
	failed := after.RoundErrors - before.RoundErrors
	t.Logf("one slow sync at 50 ms from Redis: %d of %d rounds failed; %d of %d requests refused (a tenth of the limit offered)",
		failed, after.Rounds-before.Rounds, refused, len(r.Offered))
	// The slow sync, and those the spike still catches: 1 alone, 3 of
	// 15 once under a whole CI run. The cascade failed 6 in a row.
	assert.LessOrEqual(t, failed, uint64(4), "rounds that reached no fleet")
	assert.Zero(t, refused, "refusals of a key at a tenth of its limit")
}
