package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestKeyErrorFollowsFailMode puts a value of the wrong type where a
// key's lease state lives in a real Redis: the lease script fails for
// that key alone (WRONGTYPE). Each policy must then follow its FailMode,
// not refuse forever with no error, and Health must count the key and
// carry the error while the other keys are served as usual. Before the
// fix, each key was refused after its starter credit, whatever the
// FailMode, and Health said Healthy with nothing failing.
func TestKeyErrorFollowsFailMode(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	c := srv.Client(t)
	for _, key := range []string{"open:k", "closed:k", "static:k"} {
		require.NoError(t, c.SAdd(ctx, "hl:{"+key+"}:lease", "not a hash").Err())
	}
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk, FleetSize: 4,
		Policies: []hybrid.Policy{
			{Name: "open", Prefix: "open:", Limit: 1000, Window: time.Second, OnUnreachable: hybrid.FailOpen},
			{Name: "closed", Prefix: "closed:", Limit: 1000, Window: time.Second, OnUnreachable: hybrid.FailClosed},
			{Name: "static", Prefix: "static:", Limit: 1000, Window: time.Second},
			{Name: "fine", Prefix: "fine:", Limit: 1000, Window: time.Second},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for _, key := range []string{"open:k", "closed:k", "static:k", "fine:k"} {
		_, err := l.AllowN(key, 0)
		require.NoError(t, err)
	}
	for range 3 {
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(ctx), "the fleet is reachable")
	}
	h := l.Health()
	assert.Equal(t, partition.Healthy, h.Level, "one key's error is not an outage")
	assert.Equal(t, 3, h.FailingKeys)
	require.Error(t, h.KeyError)
	assert.Contains(t, h.KeyError.Error(), "WRONGTYPE")

	count := func(key string) (admitted int, degraded bool) {
		for range 500 {
			d, err := l.Allow(key)
			require.NoError(t, err)
			if d.Allowed() {
				admitted++
			}
			degraded = degraded || d.Degraded()
		}
		return admitted, degraded
	}
	n, deg := count("open:k")
	assert.Equal(t, 500, n, "FailOpen admits")
	assert.True(t, deg)
	n, deg = count("closed:k")
	assert.LessOrEqual(t, n, 1, "FailClosed refuses past the starter credit")
	assert.True(t, deg)
	n, deg = count("static:k")
	assert.InDelta(t, 250, n, 2, "FailStatic limits to the node's share: a quarter of the burst, FleetSize being 4")
	assert.True(t, deg)
	n, deg = count("fine:k")
	assert.Positive(t, n, "the other keys are served from their leases")
	assert.False(t, deg)

	// Once the bad value is gone, the keys are answered again and what
	// was admitted meanwhile is reported.
	for _, key := range []string{"open:k", "closed:k", "static:k"} {
		require.NoError(t, c.Del(ctx, "hl:{"+key+"}:lease").Err())
	}
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, 0, l.Health().FailingKeys)
	tokens, err := c.HGet(ctx, "hl:{open:k}:lease", "tokens").Float64()
	require.NoError(t, err, "open:k's lease state")
	assert.LessOrEqual(t, tokens, 500.0, "the 500 FailOpen admitted were reported")
}
