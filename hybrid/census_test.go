package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestStrictFleetSizeCounted: three nodes whose keys are all Strict, with
// FleetSize left unset, and a fourth that leases a Hybrid key, learn from
// Redis's census that they are four (the leasing node registers too), so
// that when Redis goes away each Strict node's fail-static bucket holds a
// quarter of the limit, and the three admit less than the limit, not
// three times it (as they did when the size was FleetSize's default, 1).
func TestStrictFleetSizeCounted(t *testing.T) {
	t.Parallel()
	const limit, nodes = 300, 4
	srv := redistest.StartServer(t)
	proxy, err := faultnet.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	ctx := context.Background()
	fleet := make([]*hybrid.Limiter, nodes)
	for i := range fleet {
		mode := hybrid.Strict
		if i == nodes-1 {
			mode = hybrid.Hybrid
		}
		l, err := hybrid.New(hybrid.Config{
			Node: fmt.Sprint("n", i), Syncer: redisVia(t, srv, proxy.Addr(), 100*time.Millisecond), ManualSync: true,
			// A census gets twice SyncTimeout, which defaults to the
			// 10 ms interval: on a loaded CI under -race a census past
			// 20 ms failed, silently as a census does, and the nodes
			// counted 1 or 3 (a node admitted 300 and 100 of 300).
			Interval: 10 * time.Millisecond, SyncTimeout: 100 * time.Millisecond, HotKeyRate: -1,
			Policies: []hybrid.Policy{{Name: "s", Mode: mode, Limit: limit, Window: time.Minute}},
		})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		fleet[i] = l
	}
	_, err = fleet[nodes-1].Allow("leased") // the Hybrid node leases a key
	require.NoError(t, err)
	// Two rounds of censuses, ten intervals apart: the first node to
	// count finds itself alone; by the second every node finds all.
	for range 2 {
		for _, l := range fleet {
			// The calls time out after 100 ms, so that the blackhole
			// below is found fast; a loaded CI's first call (the script
			// loaded, under -race) once took longer (run 95), and five
			// tries in a row did once too (run 139, 0.5 s): tried for
			// 3 s.
			var err error
			for end := time.Now().Add(3 * time.Second); ; {
				if err = l.SyncOnce(ctx); err == nil || time.Now().After(end) {
					break
				}
			}
			require.NoError(t, err, "a round, tried for 3 s")
		}
		time.Sleep(110 * time.Millisecond)
	}

	proxy.Blackhole()
	total := 0
	for _, l := range fleet[:nodes-1] {
		n, degraded := offerN(t, l, "tenant", limit)
		assert.True(t, degraded, "Redis is cut off")
		t.Logf("a node admitted %d of %d while Redis was cut off", n, limit)
		assert.LessOrEqual(t, n, limit/nodes+2, "a node spent more than its quarter")
		total += n
	}
	assert.LessOrEqual(t, total, limit*(nodes-1)/nodes+nodes*2, "the Strict nodes, against a limit of %d", limit)
}
