package global_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestRestartedNodeNotForgiven: a node silent long enough to be reserved
// for (its fallback spend charged to the bucket as the others synced)
// comes back as a new process: its report is of a new series, so what it
// reports was spent since it started, not on the ladder while it was
// silent, and must be charged in full. It used to be taken off the
// reserve, charged at no time at all.
func TestRestartedNodeNotForgiven(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	lim := global.Limit{Limit: 1000, Window: time.Second}
	const interval = 10 * time.Millisecond
	steps := []partition.Step{{Until: 200 * time.Millisecond, Factor: 1}, {Factor: 0.5}}
	sync := func(node string, u global.Usage) global.Grant {
		u.Key, u.Limit = "restart", lim
		resp, err := r.Sync(context.Background(), &global.Request{Node: node, Interval: interval, Fallback: steps, Keys: []global.Usage{u}})
		require.NoError(t, err)
		require.NoError(t, resp.Grants[0].Err)
		return resp.Grants[0]
	}
	require.Equal(t, int64(1000), sync("b", global.Usage{Demand: 1000}).Lease)
	require.Equal(t, int64(0), sync("a", global.Usage{Demand: 500, Series: 1}).Lease) // a is known, demanding, with no lease
	time.Sleep(250 * time.Millisecond)
	// b spent its lease; a is silent and reserved for: 200 at rate 1/ms.
	before := sync("b", global.Usage{Consumed: 1000})
	// a restarts: a new series, 100 spent since.
	after := sync("a", global.Usage{Consumed: 100, Series: 2, Total: 100})
	assert.GreaterOrEqual(t, after.Used, before.Used+90, "a restarted node's 100 spent: used %d -> %d", before.Used, after.Used)
}
