package global_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
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
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: 24 * time.Hour}
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
			g := syncSeries(t, r, "n", key, lim, st.series, st.total, st.consumed, 0)
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
	lim := fleet.Limit{Limit: 10, Window: time.Second}
	resp, err := r.Sync(context.Background(), &fleet.Request{Node: "n", Interval: time.Second, Keys: []fleet.Usage{
		{Key: "a", Limit: lim, Series: fleet.MaxLimit + 1},
		{Key: "b", Limit: lim, Series: 1, Total: fleet.MaxLimit + 1},
		{Key: "c", Limit: lim, Series: 1, Total: -1},
		{Key: "d", Limit: lim, Series: fleet.MaxLimit, Total: fleet.MaxLimit, Demand: 1},
	}})
	require.NoError(t, err)
	for _, g := range resp.Grants[:3] {
		assert.ErrorIs(t, g.Err, fleet.ErrInvalid)
	}
	assert.NoError(t, resp.Grants[3].Err)
}

// TestFallbackValidated: a Request's Fallback steps must grow and their
// factors lie in [0, 1]; the last may last for ever (Until 0).
func TestFallbackValidated(t *testing.T) {
	t.Parallel()
	ok := &fleet.Request{Node: "n", Interval: time.Second, Fallback: partition.DefaultSteps}
	require.NoError(t, ok.Validate())
	for _, steps := range [][]partition.Step{
		{{Until: time.Second, Factor: math.NaN()}},
		{{Until: time.Second, Factor: -0.1}},
		{{Until: time.Second, Factor: 1.5}},
		{{Until: -time.Second, Factor: 1}},
		{{Until: time.Second, Factor: 1}, {Until: time.Second, Factor: 0.5}},
		{{Until: 0, Factor: 1}, {Until: time.Second, Factor: 0.5}},
		make([]partition.Step, fleet.MaxFallbackSteps+1),
	} {
		r := &fleet.Request{Node: "n", Interval: time.Second, Fallback: steps}
		assert.ErrorIs(t, r.Validate(), fleet.ErrInvalid, "%+v", steps)
	}
}

// syncSeries syncs one report of key for node, with a series and Total.
func syncSeries(t *testing.T, r *global.Redis, node, key string, lim fleet.Limit, series uint64, total, consumed, demand int64) fleet.Grant {
	t.Helper()
	resp, err := r.Sync(context.Background(), &fleet.Request{Node: node, Interval: time.Second,
		Keys: []fleet.Usage{{Key: key, Limit: lim, Consumed: consumed, Demand: demand, Series: series, Total: total}}})
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
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: 24 * time.Hour}
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
	lim := fleet.Limit{Limit: 1000, Window: time.Second}
	const interval = 10 * time.Millisecond
	steps := []partition.Step{{Until: 200 * time.Millisecond, Factor: 1}, {Factor: 0.5}}
	sync := func(node string, u fleet.Usage) fleet.Grant {
		u.Key, u.Limit = "restart", lim
		resp, err := r.Sync(context.Background(), &fleet.Request{Node: node, Interval: interval, Fallback: steps, Keys: []fleet.Usage{u}})
		require.NoError(t, err)
		require.NoError(t, resp.Grants[0].Err)
		return resp.Grants[0]
	}
	require.Equal(t, int64(1000), sync("b", fleet.Usage{Demand: 1000}).Lease)
	lag := sync("a", fleet.Usage{Demand: 500, Series: 1}).Lease // a is known, demanding, with its lag at most (lagOf)
	require.LessOrEqual(t, lag, int64(2))
	time.Sleep(250 * time.Millisecond)
	// b spent its lease; a is silent and reserved for: 200 at rate 1/ms.
	start := time.Now()
	before := sync("b", fleet.Usage{Consumed: 1000})
	// a restarts: a new series, 100 spent since.
	after := sync("a", fleet.Usage{Consumed: 100, Series: 2, Total: 100})
	// The bucket refills a token a millisecond between the two scripts,
	// at most the time both calls took: 1-3 ms alone, 17 once under a
	// loaded CI's -race. Forgiven, the report would add nothing, and used
	// would fall by the refill: below the bound while the calls take
	// under 100 ms.
	refill := int64(time.Since(start)/time.Millisecond) + 1
	require.Less(t, refill, int64(100), "the two calls took too long to tell a charge from a refill")
	assert.GreaterOrEqual(t, after.Used, before.Used+100-lag-refill, "a restarted node's 100 spent, %d of them its lease: used %d -> %d (refill up to %d)", lag, before.Used, after.Used, refill)
}

// TestHoldValidated: a key's Hold is from 0 to 10,000 Intervals; Redis
// fails any other key's Grant before it runs a script, so that no node
// can make a lease stand for as long as it likes, and leases the others.
func TestHoldValidated(t *testing.T) {
	t.Parallel()
	r := newSyncer(t, redistest.StartServer(t).DeadlineClient(t))
	for _, c := range []struct {
		hold, iv time.Duration
		ok       bool
	}{
		{0, time.Second, true}, {10 * time.Second, time.Second, true}, {10_000 * time.Second, time.Second, true},
		{-time.Nanosecond, time.Second, false}, {10_000*time.Second + time.Millisecond, time.Second, false},
		{time.Duration(math.MaxInt64), time.Second, false}, {time.Duration(math.MinInt64), time.Second, false},
		// 10,000 Intervals of a whole number of ns, not of µs: 10,000
		// times the Interval's µs is less (hybrid asks for it: holdOf).
		{10_000 * (time.Second / 9), time.Second / 9, true},
	} {
		u := fleet.Usage{Key: "k", Limit: fleet.Limit{Limit: 100, Window: time.Second}, Demand: 1, Hold: c.hold}
		resp, err := r.Sync(context.Background(), &fleet.Request{Node: "n", Interval: c.iv, Keys: []fleet.Usage{u, {Key: "other", Limit: u.Limit, Demand: 1}}})
		require.NoError(t, err, "%v", c.hold)
		require.NoError(t, resp.Grants[1].Err, "%v", c.hold)
		if c.ok {
			assert.NoError(t, resp.Grants[0].Err, "%v", c.hold)
		} else {
			assert.ErrorIs(t, resp.Grants[0].Err, fleet.ErrInvalid, "%v", c.hold)
		}
	}
}

// TestHostileIntervalKeepsTheKey: a node's Interval of centuries (a
// Request needs only a positive one) with a Hold it allows must not
// wrap the longest rest (10,000 Intervals, in µs) into a negative TTL:
// Redis would expire the key's state, and every node's leases and
// spending with it.
func TestHostileIntervalKeepsTheKey(t *testing.T) {
	t.Parallel()
	r := newSyncer(t, redistest.StartServer(t).DeadlineClient(t))
	lim := fleet.Limit{Limit: 1000, Window: time.Hour}
	sync := func(node string, iv time.Duration, u fleet.Usage) fleet.Grant {
		u.Key, u.Limit = "k", lim
		resp, err := r.Sync(context.Background(), &fleet.Request{Node: node, Interval: iv, Keys: []fleet.Usage{u}})
		require.NoError(t, err)
		require.NoError(t, resp.Grants[0].Err)
		return resp.Grants[0]
	}
	sync("a", 100*time.Millisecond, fleet.Usage{Demand: 1, Series: 1})
	sync("a", 100*time.Millisecond, fleet.Usage{Consumed: 600, Total: 600, Demand: 1, Series: 1})
	// 10,000 of its µs are just past 2^63: a product wrapped to -9.2e18.
	sync("b", 922_337_203_685_478*time.Microsecond, fleet.Usage{Demand: 1, Series: 1, Hold: time.Hour})
	g := sync("a", 100*time.Millisecond, fleet.Usage{Total: 600, Demand: 1, Series: 1})
	assert.Less(t, g.Remaining, int64(500), "a's 600 still spent")
}
