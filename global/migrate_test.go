package global_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redisslot"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestLeaseBatchSlotMoves moves the slot of a lease batch's keys from
// one master to another while a client still maps it to the first:
// midway (some keys moved, some not) and then whole. Midway the call is
// refused (TRYAGAIN) and every key fails as unreachable, none applied;
// once moved, the call is redirected (MOVED) and runs on the new master,
// every key applied once, on one master.
func TestLeaseBatchSlotMoves(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 2)
	from, to := cl.Masters[0], cl.Masters[1]
	slotOf := func(key string) int { return redisslot.Of(global.RedisKeyForTest("hl:", key, "lease")) }
	var keys []string
	for i := 0; len(keys) < 6; i++ {
		k := fmt.Sprint("tenant-", i)
		if cl.MasterFor(global.RedisKeyForTest("hl:", k, "lease")) == from && (len(keys) == 0 || slotOf(k) == slotOf(keys[0])) {
			keys = append(keys, k)
		}
	}
	slot := slotOf(keys[0])
	r := newSyncer(t, cl.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 1000, Window: 24 * time.Hour} // no refill to speak of
	sync := func(consumed int64) *fleet.Response {
		req := &fleet.Request{Node: "n", Interval: time.Second}
		for _, k := range keys {
			req.Keys = append(req.Keys, fleet.Usage{Key: k, Limit: lim, Consumed: consumed})
		}
		resp, err := r.Sync(ctx, req)
		if err != nil { // every key failed alike
			resp = &fleet.Response{Grants: make([]fleet.Grant, len(keys))}
			for i := range resp.Grants {
				resp.Grants[i].Err = err
			}
		}
		return resp
	}
	for _, g := range sync(10).Grants {
		require.NoError(t, g.Err)
	}

	fc, tc := from.Client(t), to.Client(t)
	fromID, err := fc.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	toID, err := tc.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, tc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	require.NoError(t, fc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	port, err := strconv.Atoi(to.Addr[len("127.0.0.1:"):])
	require.NoError(t, err)
	migrate := func(k string) {
		require.NoError(t, fc.Migrate(ctx, "127.0.0.1", strconv.Itoa(port), global.RedisKeyForTest("hl:", k, "lease"), 0, 5*time.Second).Err())
	}
	migrate(keys[0]) // midway
	for i, g := range sync(10).Grants {
		assert.ErrorIs(t, g.Err, fleet.ErrUnreachable, "midway, key %d", i)
	}
	for _, k := range keys[1:] {
		migrate(k)
	}
	require.NoError(t, tc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	require.NoError(t, fc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())

	for i, g := range sync(10).Grants {
		if assert.NoError(t, g.Err, "moved, key %d", i) {
			assert.Equal(t, int64(20), g.Used, "key %d: 10 and 10 reported, the refused report not applied", i)
		}
	}
	n, err := fc.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "keys left on the old master")
}
