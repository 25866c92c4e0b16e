package hybrid_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ok := hybrid.Policy{Name: "p", Limit: 10, Window: time.Second}
	s := newScripted(0)
	tests := []struct {
		name string
		cfg  hybrid.Config
		want string
	}{
		{"no policies", hybrid.Config{Syncer: s}, "Config.Policies is empty"},
		{"interval", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, Interval: time.Microsecond}, "Config.Interval"},
		{"sync timeout", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, SyncTimeout: -1}, "Config.SyncTimeout"},
		{"strict timeout", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, StrictTimeout: -1}, "Config.StrictTimeout"},
		{"shares", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, Shares: 7}, "Config.Shares"},
		{"idle", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, IdleTimeout: time.Millisecond}, "Config.IdleTimeout"},
		{"max keys", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, MaxKeys: -1}, "Config.MaxKeys"},
		{"max key len", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, MaxKeyLen: -1}, "Config.MaxKeyLen"},
		{"name", hybrid.Config{Policies: []hybrid.Policy{{Limit: 1, Window: time.Second}}, Syncer: s}, "Policies[0]: Name is empty"},
		{"dup", hybrid.Config{Policies: []hybrid.Policy{ok, ok}, Syncer: s}, `Policies[1]: Name "p" is used twice`},
		{"mode", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Mode: 9, Limit: 1, Window: time.Second}}, Syncer: s}, "Mode 9"},
		{"fail mode", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", OnUnreachable: 9, Limit: 1, Window: time.Second}}, Syncer: s}, "OnUnreachable 9"},
		{"limit", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Window: time.Second}}, Syncer: s}, `Policies[0] ("p"): Limit is 0`},
		{"window", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Limit: 1}}, Syncer: s}, "Window is 0s"},
		{"short window", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Limit: 1, Window: time.Microsecond}}, Syncer: s}, "needs at least 1ms"},
		{"burst", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Limit: 1, Window: time.Second, Burst: -1}}, Syncer: s}, "Burst is -1"},
		{"rate and limit", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Rate: 5, Limit: 1, Burst: 1}}, Syncer: s}, "Rate is set, so Limit and Window must be zero"},
		{"rate burst", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Rate: 5}}, Syncer: s}, "Burst is 0; it must be at least 1 when Rate is set"},
		{"rate nan", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Rate: -1, Burst: 1}}, Syncer: s}, "Rate is -1"},
		{"local only alg", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Algorithm: local.SlidingLog, Limit: 1, Window: time.Second}}, Syncer: s}, "Algorithm slidinglog is local only"},
		{"no syncer", hybrid.Config{Policies: []hybrid.Policy{ok}}, "Mode hybrid needs Config.Syncer"},
		{"failover alone", hybrid.Config{Policies: []hybrid.Policy{ok}, Failover: s}, "Config.Failover is set but Config.Syncer is not"},
		{"failover twice", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, Failover: s}, "Config.Failover is Config.Syncer"},
		{"hot lease syncs", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, HotLeaseSyncs: math.NaN()}, "Config.HotLeaseSyncs is NaN"},
		{"fleet size", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, FleetSize: -1}, "Config.FleetSize"},
		{"breaker", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, Breaker: partition.BreakerConfig{Cooldown: -1}}, "Config.Breaker: partition: BreakerConfig.Cooldown"},
		{"ladder", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, Ladder: partition.LadderConfig{Floor: 2}}, "Config.Ladder: partition: LadderConfig.Floor"},
		{"ladder steps", hybrid.Config{Policies: []hybrid.Policy{ok}, Syncer: s, Ladder: partition.LadderConfig{Steps: manySteps(fleet.MaxFallbackSteps + 1)}}, "Config.Ladder.Steps has 17 steps"},
		{"strict no decider", hybrid.Config{Policies: []hybrid.Policy{{Name: "p", Mode: hybrid.Strict, Limit: 1, Window: time.Second}}, Syncer: s}, "decides single requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, err := hybrid.New(tt.cfg)
			require.ErrorIs(t, err, hybrid.ErrInvalidConfig)
			assert.Nil(t, l)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestRatePolicy checks that a Rate policy leases as its Limit per Window
// would.
func TestRatePolicy(t *testing.T) {
	t.Parallel()
	s := newScripted(0, "k")
	l, clk := stepped(t, s, fleet.Equal, hybrid.Policy{Name: "r", Rate: 2000, Burst: 50})
	admit(t, l, "k", 1000)
	clk.Advance(100 * time.Millisecond)
	require.NoError(t, l.SyncOnce(context.Background()))
	// Offered 10000/s: 1500 per interval with headroom, cut to one
	// node's equal share of 2000/s * 100 ms = 200, then to the burst.
	assert.Equal(t, int64(50), s.last().Demand)
	assert.Equal(t, fleet.Limit{Limit: 2_000_000, Window: 1000 * time.Second, Burst: 50}, s.last().Limit)
}

// manySteps is a valid ladder of n steps.
func manySteps(n int) []partition.Step {
	steps := make([]partition.Step, n)
	for i := range steps {
		steps[i] = partition.Step{Until: time.Duration(i+1) * time.Second, Factor: 0.5}
	}
	steps[n-1].Until = 0
	return steps
}
