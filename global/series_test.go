package global_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestReportsIdempotent sends, on a real Redis, reports that a lost
// reply or a retry makes a node send again: each must count once. A
// report of a series Redis has not seen (a restarted node, a key seen
// afresh) counts its Consumed as it is. Before reports carried a series,
// a report sent twice counted twice.
func TestReportsIdempotent(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	for _, alg := range []global.Algorithm{global.TokenBucket, global.SlidingWindow} {
		lim := global.Limit{Algorithm: alg, Limit: 1000, Window: 24 * time.Hour}
		key := "series-" + alg.String()
		steps := []struct {
			name            string
			consumed, total int64
			series          uint64
			used            int64
		}{
			{"a series begins: Consumed counts", 10, 0, 77, 10},
			{"the next report", 10, 10, 77, 20},
			{"sent again after a lost reply", 10, 10, 77, 20},
			{"the lost one folded into the next", 30, 30, 77, 40},
			{"less owed than Total moved (consumption too old to report)", 5, 50, 77, 45},
			{"Total back (a give-back): nothing until it catches up", 0, 45, 77, 45},
			{"caught up", 10, 60, 77, 55},
			{"a new series (a restart): Consumed counts", 7, 3, 91, 62},
			{"no series: Consumed counts", 4, 0, 0, 66},
		}
		for _, st := range steps {
			resp, err := r.Sync(context.Background(), &global.Request{Node: "n", Interval: time.Second,
				Keys: []global.Usage{{Key: key, Limit: lim, Consumed: st.consumed, Series: st.series, Total: st.total}}})
			require.NoError(t, err)
			g := resp.Grants[0]
			require.NoError(t, g.Err)
			assert.Equal(t, st.used, g.Used, "%v: %s", alg, st.name)
		}
	}
}

// TestSeriesValidated: a Series or Total past what Redis's numbers hold
// exactly, or a negative Total, fails the key, not the call.
func TestSeriesValidated(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	r := newSyncer(t, s.DeadlineClient(t))
	lim := global.Limit{Limit: 10, Window: time.Second}
	resp, err := r.Sync(context.Background(), &global.Request{Node: "n", Interval: time.Second, Keys: []global.Usage{
		{Key: "a", Limit: lim, Series: global.MaxLimit + 1},
		{Key: "b", Limit: lim, Series: 1, Total: global.MaxLimit + 1},
		{Key: "c", Limit: lim, Series: 1, Total: -1},
		{Key: "d", Limit: lim, Series: global.MaxLimit, Total: global.MaxLimit, Demand: 1},
	}})
	require.NoError(t, err)
	for _, g := range resp.Grants[:3] {
		assert.ErrorIs(t, g.Err, global.ErrInvalid)
	}
	assert.NoError(t, resp.Grants[3].Err)
}

// TestFallbackValidated: a Request's Fallback steps must grow and their
// factors lie in [0, 1]; the last may last for ever (Until 0).
func TestFallbackValidated(t *testing.T) {
	t.Parallel()
	ok := &global.Request{Node: "n", Interval: time.Second, Fallback: partition.DefaultSteps}
	require.NoError(t, ok.Validate())
	for _, steps := range [][]partition.Step{
		{{Until: time.Second, Factor: math.NaN()}},
		{{Until: time.Second, Factor: -0.1}},
		{{Until: time.Second, Factor: 1.5}},
		{{Until: -time.Second, Factor: 1}},
		{{Until: time.Second, Factor: 1}, {Until: time.Second, Factor: 0.5}},
		{{Until: 0, Factor: 1}, {Until: time.Second, Factor: 0.5}},
		make([]partition.Step, global.MaxFallbackSteps+1),
	} {
		r := &global.Request{Node: "n", Interval: time.Second, Fallback: steps}
		assert.ErrorIs(t, r.Validate(), global.ErrInvalid, "%+v", steps)
	}
}
