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
// FleetSize left unset, learn from Redis's census that they are three,
// so that when Redis goes away each node's fail-static bucket holds a
// third of the limit, and the fleet admits about the limit, not three
// times it (as it did when the size was FleetSize's default, 1).
func TestStrictFleetSizeCounted(t *testing.T) {
	t.Parallel()
	const limit, nodes = 300, 3
	srv := redistest.StartServer(t)
	proxy, err := faultnet.NewProxy(srv.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	ctx := context.Background()
	fleet := make([]*hybrid.Limiter, nodes)
	for i := range fleet {
		l, err := hybrid.New(hybrid.Config{
			Node: fmt.Sprint("n", i), Syncer: redisVia(t, srv, proxy.Addr()), ManualSync: true,
			Interval: 10 * time.Millisecond, HotKeyRate: -1,
			Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: limit, Window: time.Minute}},
		})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		fleet[i] = l
	}
	// Two rounds of censuses, ten intervals apart: the first node to
	// count finds itself alone; by the second every node finds all.
	for range 2 {
		for _, l := range fleet {
			require.NoError(t, l.SyncOnce(ctx))
		}
		time.Sleep(110 * time.Millisecond)
	}

	proxy.Blackhole()
	total := 0
	for _, l := range fleet {
		n, degraded := offerN(t, l, "tenant", limit)
		assert.True(t, degraded, "Redis is cut off")
		t.Logf("a node admitted %d of %d while Redis was cut off", n, limit)
		assert.LessOrEqual(t, n, limit/nodes+2, "a node spent more than its third")
		total += n
	}
	assert.LessOrEqual(t, total, limit+nodes*2, "the fleet, against a limit of %d", limit)
}
