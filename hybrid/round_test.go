package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestManyKeysAreNotAnOutage: 12,000 one-off keys on one node, each
// seen once, beside a tenant at 50 requests a second. A round that
// cannot sync every key within its time is not an outage: the node stays
// Healthy, the tenant is admitted, and the one-off keys are forgotten
// once idle. Before, the round's single call outlasted SyncTimeout, every
// sync failed "context deadline exceeded" while Redis was up, the node
// went Degraded then Emergency, and no key was ever forgotten.
func TestManyKeysAreNotAnOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t)})
	require.NoError(t, err)
	l, err := hybrid.New(hybrid.Config{
		Node:        "many",
		Policies:    []hybrid.Policy{{Name: "api", Limit: 100, Window: time.Second}},
		Syncer:      r,
		Interval:    100 * time.Millisecond,
		IdleTimeout: time.Second,
		MaxKeys:     20_000,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()

	const oneOff = 12_000
	for i := range oneOff {
		_, err := l.Allow(fmt.Sprintf("one-off:%d", i))
		require.NoError(t, err)
	}
	worst := partition.Healthy
	tenant, refused := 0, 0
	// Until the one-off keys are forgotten, at most 20 s. A key synced
	// an idle second after its request is reported, handed back and
	// forgotten by that sync (TestOneOffKeySyncedOnce); one synced
	// sooner holds a lease and is handed back at its next sync, after
	// every key not synced since. Under -race a pass over the table
	// takes 1-4 s alone; on a CI of 2 cores running another package's
	// tests beside, rounds carried 200-400 keys, and when each key took
	// two syncs 12,001 keys were all still held after 10 s.
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	for time.Since(start) < 3*time.Second || l.Len() >= 100 && time.Now().Before(deadline) {
		d, err := l.Allow("tenant")
		require.NoError(t, err)
		tenant++
		if !d.Allowed() {
			refused++
		}
		worst = max(worst, fleettest.Link(l.Health()))
		time.Sleep(20 * time.Millisecond)
	}
	h := l.Health()
	t.Logf("%d one-off keys: worst health %v, now %v; tenant refused %d of %d; keys tracked %d after %v",
		oneOff, worst, h.Level, refused, tenant, l.Len(), time.Since(start).Round(time.Millisecond))
	assert.Equal(t, partition.Healthy, worst, "a round too long for every key is not an outage")
	// Before rounds were split the tenant was refused 78 times in 178.
	// With split rounds ordered by age, and every key that had spent
	// its starter credit first, it waited behind up to 10,000 one-off
	// keys that had: under -race on 2 cores 0-24 refused in 139-152
	// (15% was the bound, and failed now and then). Ordered by need
	// (byNeed), it is synced first every round: 0 refused in 16 runs
	// alone and in 8 beside two packages' race tests (179-405 requests);
	// 5 of 146 once, without -race, beside a whole CI run and four other
	// packages' tests on the same 2 cores, when rounds start late.
	assert.LessOrEqual(t, refused, tenant/20, "the tenant, far under its limit, is admitted")
	assert.Less(t, l.Len(), 100, "idle one-off keys are forgotten")
}

// TestOneOffKeySyncedOnce: a key seen once, whose first sync comes after
// it has gone idle (a round too long for every key reaches it late), is
// reported, handed back and forgotten by that one sync. Its request used
// to be dated by the sync that first saw it, so every one-off key took
// two syncs, the second an IdleTimeout later: 300 one-off keys were all
// still held after the first round.
func TestOneOffKeySyncedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Node: "n1", Syncer: redisSyncer(t, srv), ManualSync: true, Clock: clk,
		Policies:    []hybrid.Policy{{Name: "api", Limit: 100, Window: time.Second}},
		Interval:    100 * time.Millisecond,
		IdleTimeout: time.Second,
		SyncTimeout: 5 * time.Second, // a loaded CI's -race: the round's calls must not time out
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const oneOff = 300
	for i := range oneOff {
		d, err := l.Allow(fmt.Sprintf("one-off:%d", i))
		require.NoError(t, err)
		require.True(t, d.Allowed())
	}
	for range 2 { // seen twice: still active at its first sync
		_, err := l.Allow("twice")
		require.NoError(t, err)
	}
	clk.Advance(2 * time.Second)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, 1, l.Len(), "the one-off keys are forgotten at their first sync, the key seen twice kept")
	used, err := srv.Client(t).HGet(ctx, "hl:{one-off:7}:lease", "tokens").Float64()
	require.NoError(t, err, "one-off:7's lease state")
	assert.Less(t, used, 100.0, "its request was reported")
}
