package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/sim"
)

// TestReality runs one scenario (4 nodes, uniform load at twice the
// limit, 100 ms syncs, Redis) twice: on the wall clock against a real
// redis-server, and in the simulator. Their overshoot, false rejection
// and under-limit refusals must agree within 2 percentage points;
// docs/tuning.md records both.
func TestReality(t *testing.T) {
	t.Parallel()
	const (
		nodes    = 4
		rate     = 1000
		limit    = 2000
		interval = 100 * time.Millisecond
		run      = 6 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	srv := redistest.StartServer(t)
	fleet := fleettest.Limiters(t, nodes, func(int) hybrid.Config {
		r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t)})
		require.NoError(t, err)
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: r, Interval: interval}
	})
	real := fleettest.Drive(t, fleet, "k", []float64{rate, rate, rate, rate}, run)
	realOver, realFalse := real.Versus(real.IdealRun(t, policy), time.Second)
	realUnder := real.UnderLimit(t, policy)

	s, err := sim.Run(sim.Config{Nodes: nodes, Rate: rate, Limit: limit, Interval: interval, RTT: 200 * time.Microsecond, Duration: run})
	require.NoError(t, err)
	t.Logf("real Redis: admitted %d of %d, overshoot %.2f%%, false rejection %.2f%%; simulated: admitted %d of %d, overshoot %.2f%%, false rejection %.2f%%",
		len(real.Admitted), len(real.Offered), realOver, realFalse, s.Admitted, s.Offered, s.Overshoot, s.FalseRejection)
	assert.InDelta(t, realOver, s.Overshoot, 2, "overshoot agrees within 2 points")
	assert.InDelta(t, realFalse, s.FalseRejection, 2, "false rejection agrees within 2 points")
	t.Logf("under-limit refusals: real Redis %.3f%%, simulated %.3f%%", realUnder, s.UnderLimit)
	assert.InDelta(t, realUnder, s.UnderLimit, 2, "under-limit refusals agree within 2 points")
	// The points are small beside 2; the admissions, which the points are
	// drawn from, must agree too.
	realPart, simPart := float64(len(real.Admitted))/float64(len(real.Offered)), float64(s.Admitted)/float64(s.Offered)
	assert.InDelta(t, realPart, simPart, 0.02, "the part of the offered load admitted")
	// Both points are small, so the bounds above would pass a simulator
	// that merely echoed the ideal limiter: a fleet that syncs every
	// 100 ms must differ from it, as the real one does.
	assert.Positive(t, s.Overshoot+s.FalseRejection, "the simulated fleet is not the ideal")
	assert.NotEqual(t, s.Ideal, s.Admitted, "the simulated fleet is not the ideal")
}
