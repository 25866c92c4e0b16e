package global_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestSyncOneMasterDown kills one master of a 3-master Cluster: Sync
// still answers, the dead master's keys each with an error wrapping
// ErrUnreachable and the live masters' keys with their grants, both
// right after the kill (connections refused) and once the Cluster has
// marked the master failed. With every master dead, Sync fails as a
// whole, as for a single Redis.
func TestSyncOneMasterDown(t *testing.T) {
	t.Parallel()
	// Without full coverage required, the live masters keep serving
	// their slots once the Cluster marks the dead one failed; with it
	// (Redis's default), every node answers CLUSTERDOWN then.
	cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	r := newSyncer(t, cl.DeadlineClient(t))
	byMaster := keysOnEachMaster(cl, 4)
	dead := cl.Masters[1]
	lim := fleet.Limit{Limit: 1000, Window: time.Second}
	req := &fleet.Request{Node: "n1", Interval: 100 * time.Millisecond}
	onDead := map[string]bool{}
	for m, keys := range byMaster {
		for _, k := range keys {
			req.Keys = append(req.Keys, fleet.Usage{Key: k, Limit: lim, Demand: 5})
			onDead[k] = m == dead
		}
	}
	ctx := context.Background()
	_, err := r.Sync(ctx, req) // the client learns the slot map
	require.NoError(t, err)

	dead.Kill()
	check := func(when string) {
		start := time.Now()
		resp, err := r.Sync(ctx, req)
		took := time.Since(start)
		require.NoError(t, err, "%s: a partial failure is no error of the call", when)
		t.Logf("%s: Sync with one master of 3 dead took %v", when, took)
		for i, g := range resp.Grants {
			key := req.Keys[i].Key
			if onDead[key] {
				assert.ErrorIs(t, g.Err, fleet.ErrUnreachable, "%s: key %s on the dead master", when, key)
				assert.Zero(t, g.Lease, "%s: key %s on the dead master", when, key)
				continue
			}
			if assert.NoError(t, g.Err, "%s: key %s on a live master", when, key) {
				assert.GreaterOrEqual(t, g.Lease, int64(5), "%s: key %s on a live master", when, key)
			}
		}
	}
	check("just killed")
	check("again")
	// The live masters mark the dead one failed after
	// cluster-node-timeout (2 s) and a round of gossip.
	time.Sleep(4 * time.Second)
	check("marked failed")

	for _, m := range cl.Masters {
		m.Kill()
	}
	_, err = r.Sync(ctx, req)
	require.Error(t, err, "every master dead")
	assert.True(t, errors.Is(err, fleet.ErrUnreachable), "every master dead: %v", err)
}
