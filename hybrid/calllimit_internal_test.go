package hybrid

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/clock"
)

// bucketFleet is a fleet of one that leases each key what its limit has
// left, keeping count of what it was told was spent.
type bucketFleet struct{ spent map[string]int64 }

func (f *bucketFleet) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i, u := range req.Keys {
		f.spent[u.Key] += u.Consumed
		resp.Grants[i] = fleet.Grant{Lease: max(0, u.Limit.Burst-f.spent[u.Key]), TTL: time.Hour, Nodes: 1, Weight: 1}
	}
	return resp, nil
}

// callLimiter is a Limiter synced by hand on a bucketFleet, its one
// policy 1,000 an hour.
func callLimiter(t *testing.T) *Limiter {
	l, err := New(Config{Node: "n", Syncer: &bucketFleet{spent: map[string]int64{}}, ManualSync: true,
		Clock: clock.NewManual(time.Unix(1_700_000_000, 0)), Policies: []Policy{{Name: "p", Limit: 1000, Window: time.Hour}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestCallLimitSurvivesForgetting: a key held under a caller's limit and
// forgotten as a decision runs (a race the sync loop can win) is made
// again under the caller's limit, not its policy's; and a limit asked
// for the forgotten key, left in wanted by that race, neither moves the
// new key nor keeps a later call from moving it.
func TestCallLimitSurvivesForgetting(t *testing.T) {
	t.Parallel()
	l := callLimiter(t)
	ctx := context.Background()
	d, err := l.AllowNLimit("k", 1, 100, 0)
	require.NoError(t, err)
	require.Equal(t, int64(100), d.Limit())
	require.NoError(t, l.SyncOnce(ctx))

	k, _ := l.keys.Load("k")
	k.word.Store(0) // its lease spent: the decision goes to refuse
	l.forget(k)
	d, _ = l.refuse(k, l.now(), 1)
	assert.Equal(t, int64(100), d.Limit(), "made again under the caller's limit, not the policy's 1,000")

	k, _ = l.keys.Load("k")
	l.forget(k)
	l.wanted.Store("k", callLimit{limit: 10}) // asked just as it was forgotten
	d, err = l.AllowNLimit("k", 1, 100, 0)
	require.NoError(t, err)
	require.Equal(t, int64(100), d.Limit())
	require.NoError(t, l.SyncOnce(ctx))
	d, err = l.AllowNLimit("k", 0, 100, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), d.Limit(), "the stale ask did not move the new key")
	_, err = l.AllowNLimit("k", 0, 10, 0)
	require.NoError(t, err)
	require.NoError(t, l.SyncOnce(ctx))
	d, err = l.AllowNLimit("k", 0, 10, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(10), d.Limit(), "a new ask moves it")
}

// TestCallLimitGoesBack: a caller that asks for another limit and, before
// the key is moved, for its limit again, keeps it.
func TestCallLimitGoesBack(t *testing.T) {
	t.Parallel()
	l := callLimiter(t)
	ctx := context.Background()
	_, err := l.AllowNLimit("k", 0, 100, 0)
	require.NoError(t, err)
	require.NoError(t, l.SyncOnce(ctx))
	_, err = l.AllowNLimit("k", 0, 10, 0)
	require.NoError(t, err)
	_, err = l.AllowNLimit("k", 0, 100, 0)
	require.NoError(t, err)
	require.NoError(t, l.SyncOnce(ctx))
	d, err := l.AllowNLimit("k", 0, 100, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), d.Limit())
}
