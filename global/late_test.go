package global_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// syncSeries syncs one report of key for node, with a series and Total.
func syncSeries(t *testing.T, r *global.Redis, node, key string, lim global.Limit, series uint64, total, consumed, demand int64) global.Grant {
	t.Helper()
	resp, err := r.Sync(context.Background(), &global.Request{Node: node, Interval: time.Second,
		Keys: []global.Usage{{Key: key, Limit: lim, Consumed: consumed, Demand: demand, Series: series, Total: total}}})
	require.NoError(t, err)
	require.NoError(t, resp.Grants[0].Err)
	return resp.Grants[0]
}

// TestLateReportKeepsLease: a report that reaches Redis after a later
// report of its series (its Total behind what Redis has seen: a request
// held up in a proxy, its caller long timed out and synced again) must
// change nothing. It used to settle the node's live lease as if the
// node had spent none of it, handing the lease back to the bucket while
// the node spent it: another node leased it again.
func TestLateReportKeepsLease(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	for _, alg := range []global.Algorithm{global.TokenBucket, global.SlidingWindow} {
		lim := global.Limit{Algorithm: alg, Limit: 1000, Window: 24 * time.Hour}
		key := "late-" + alg.String()
		// The later report, applied first: 20 spent, 600 leased.
		g := syncSeries(t, r, "n", key, lim, 5, 20, 20, 600)
		require.Equal(t, int64(600), g.Lease)
		require.Equal(t, int64(620), g.Used)
		// The earlier one (Total 10, no demand then) arrives late.
		late := syncSeries(t, r, "n", key, lim, 5, 10, 10, 0)
		assert.Equal(t, int64(620), late.Used, "%v: a late report moved the key's usage", alg)
		// Another node takes what is left: never more than the limit.
		m := sync1(t, r, "m", key, lim, 0, 1000)
		assert.LessOrEqual(t, 20+600+m.Lease, lim.Limit, "%v: consumed 20 + n's lease 600 + m's lease %d", alg, m.Lease)
		// n's next report settles its lease as it spent it: all 600.
		g = syncSeries(t, r, "n", key, lim, 5, 620, 600, 0)
		assert.Equal(t, int64(620+m.Lease), g.Used, "%v: n's lease settled", alg)
	}
}
