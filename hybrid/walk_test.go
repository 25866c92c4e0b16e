package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// restingFleet is a Syncer that lets every key rest (a lease of its
// demand for its Hold, the key far from its limit; if capped, 100, cut
// short of it, for which the node asks no early sync) and counts the
// syncs of each key.
func restingFleet(synced map[string]int, capped bool) fleet.Syncer {
	return syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i, u := range req.Keys {
			lease := u.Demand
			if capped && lease > 0 {
				lease = 100
			}
			resp.Grants[i] = fleet.Grant{Lease: lease, TTL: u.Hold, Remaining: 1_000_000, Nodes: 1, Weight: 1}
			synced[u.Key]++
		}
		return resp, nil
	})
}

// parkedKey makes a Limiter on ManualSync with key k and others other
// keys, all resting and parked, so that the walk passes over k.
func parkedKey(t *testing.T, cfg hybrid.Config, capped bool, others int) (*hybrid.Limiter, func(time.Duration), map[string]int) {
	t.Helper()
	synced := map[string]int{}
	cfg.Syncer, cfg.HotKeyRate = restingFleet(synced, capped), -1
	l, clk := manual(t, cfg)
	ctx := context.Background()
	for i := range others {
		_, err := l.Allow(fmt.Sprint("other-", i))
		require.NoError(t, err)
	}
	require.Equal(t, 1, admit(t, l, "k", 1))
	step := func(d time.Duration) {
		require.NoError(t, l.SyncOnce(ctx))
		clk.Advance(d)
	}
	for range 6 { // past the syncs before a key may rest; then parked
		step(100 * time.Millisecond)
	}
	clear(synced)
	step(10 * time.Millisecond)
	require.Zero(t, synced["k"], "k rests, parked")
	return l, step, synced
}

// TestWalkPassesOverParkedKeysNot: a round passes over a parked key
// without looking at it, so what would have ended its rest at a look
// must wake it. Each case parks "k" among 200 resting keys on
// ManualSync, where nothing takes early syncs (their queue far from
// full), and checks that the next round syncs it.
func TestWalkPassesOverParkedKeysNot(t *testing.T) {
	t.Parallel()
	pol := hybrid.Policy{Name: "api", Limit: 1_000_000, Window: time.Second}
	t.Run("runs low", func(t *testing.T) {
		t.Parallel()
		l, step, synced := parkedKey(t, hybrid.Config{Policies: []hybrid.Policy{pol}}, false, 200)
		require.Equal(t, 760, admit(t, l, "k", 760), "its lease of 1,000 (its demand), to under its low-water mark (250)")
		step(10 * time.Millisecond)
		assert.Equal(t, 1, synced["k"], "the round syncs a key whose lease runs low")
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		l, step, synced := parkedKey(t, hybrid.Config{Policies: []hybrid.Policy{pol}}, true, 200)
		require.Equal(t, 100, admit(t, l, "k", 150), "its lease, cut short: no early sync")
		step(10 * time.Millisecond)
		assert.Equal(t, 1, synced["k"], "the round syncs a refused key")
	})
	t.Run("asked before it rested", func(t *testing.T) {
		t.Parallel()
		// 300 keys fill the early queue, which nothing takes on
		// ManualSync: an ask is then left to the regular round.
		l, step, synced := parkedKey(t, hybrid.Config{Policies: []hybrid.Policy{pol}}, false, 300)
		lower := pol
		lower.Limit /= 2
		require.NoError(t, l.SetPolicies([]hybrid.Policy{lower})) // trims k's lease to 500, and asks for an early sync
		step(10 * time.Millisecond)
		clear(synced)
		require.Equal(t, 260, admit(t, l, "k", 260), "to under its low-water mark (250)")
		step(10 * time.Millisecond)
		assert.Equal(t, 1, synced["k"], "the round syncs a key whose lease runs low, its ask made before")
	})
	t.Run("offered traffic", func(t *testing.T) {
		t.Parallel()
		// Parked, a quiet key is not looked at until its lease or its
		// going idle needs it: what it admits wakes it.
		l, step, synced := parkedKey(t, hybrid.Config{Policies: []hybrid.Policy{pol}}, false, 200)
		before := l.Stats().Policies[0].Admitted
		require.Equal(t, 1, admit(t, l, "k", 1))
		step(10 * time.Millisecond)
		assert.Equal(t, before+1, l.Stats().Policies[0].Admitted, "counted by the next round")
		assert.Zero(t, synced["k"], "looked at, not synced: its lease covers it")
	})
	t.Run("invalidated", func(t *testing.T) {
		t.Parallel()
		tier := "free"
		l, step, _ := parkedKey(t, hybrid.Config{
			Policies: []hybrid.Policy{pol, {Name: "tight", Limit: 7, Window: time.Hour}},
			// Read by the sync loop and new keys: changed only between.
			Resolve: func(key string) string {
				if key == "k" && tier == "tight" {
					return "tight"
				}
				return "api"
			},
		}, false, 200)
		tier = "tight"
		l.Invalidate("k")
		step(10 * time.Millisecond)
		step(10 * time.Millisecond)
		d, err := l.Allow("k")
		require.NoError(t, err)
		assert.Equal(t, int64(7), d.Limit(), "moved to its new policy within a round")
	})
}

// TestWalkForgetsKeys: the walk drops the keys the node forgets, so that
// a flood of one-off keys leaves neither keys nor their entries behind.
func TestWalkForgetsKeys(t *testing.T) {
	t.Parallel()
	synced := map[string]int{}
	l, clk := manual(t, hybrid.Config{Syncer: restingFleet(synced, false), HotKeyRate: -1, IdleTimeout: time.Second,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1000, Window: time.Second}}})
	ctx := context.Background()
	for round := range 50 {
		for i := range 200 {
			_, err := l.Allow(fmt.Sprint("once-", round, "-", i))
			require.NoError(t, err)
		}
		require.NoError(t, l.SyncOnce(ctx))
		clk.Advance(100 * time.Millisecond)
	}
	for range 50 {
		require.NoError(t, l.SyncOnce(ctx))
		clk.Advance(100 * time.Millisecond)
	}
	assert.Zero(t, l.Len(), "every one-off key forgotten")
	assert.Less(t, l.WalkLen(), 200, "and its entry dropped")
}

// TestInboxBoundedWithoutRounds: keys made wait in an inbox for the
// loop's next round; on ManualSync with no round ever run, the keys the
// node forgets meanwhile (here Local keys, by Resolve, to make room)
// must not stay there, or memory grows with every key ever seen.
func TestInboxBoundedWithoutRounds(t *testing.T) {
	t.Parallel()
	l, clk := manual(t, hybrid.Config{MaxKeys: 100,
		Resolve:  func(string) string { return "local" },
		Policies: []hybrid.Policy{{Name: "local", Mode: hybrid.Local, Limit: 10, Window: time.Second}}})
	for i := range 20_000 {
		_, _ = l.Allow(fmt.Sprint("k", i)) // ErrTooManyKeys while full
		if i%50 == 0 {
			clk.Advance(100 * time.Millisecond) // room is made once an Interval
		}
	}
	assert.LessOrEqual(t, l.Len(), 100)
	assert.Less(t, l.InboxLen(), 2_000, "the forgotten keys dropped")
}

// TestBusyKeyLookedAtEachRound: a parked key found offered traffic is
// looked at again the next round, not a second later, so that its
// forecast (and Stats) follow a surge: parked for long, a forecast
// spread a surge over the whole park, and the early syncs of a quiet
// key that turned busy asked for too little. Rounds come 0.9 to 1.1
// Intervals apart: parked until an Interval on, a busy key was passed
// over by a round come early (its admissions, a refusal, Invalidate,
// waited two rounds).
func TestBusyKeyLookedAtEachRound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		gap  time.Duration // between rounds
	}{{"on time", 100 * time.Millisecond}, {"early", 90 * time.Millisecond}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l, step, _ := parkedKey(t, hybrid.Config{Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}}, false, 200)
			admitted := func() uint64 { return l.Stats().Policies[0].Admitted }
			for range 12 { // past the quiet park: the loop has seen it busy
				require.Equal(t, 5, admit(t, l, "k", 5))
				step(c.gap)
			}
			for range 5 {
				before := admitted()
				require.Equal(t, 5, admit(t, l, "k", 5))
				step(c.gap)
				assert.Equal(t, before+5, admitted(), "a busy key's admissions counted by the next round")
			}
		})
	}
}

// TestQuietKeyParkedUntilNeeded: a resting key offered nothing is passed
// over until its lease, its going idle or its forecast needs a look, not
// looked at again every second: at a million keys those looks were half
// of the loop's CPU (BenchmarkMillionKeysZipf), most rounds late.
func TestQuietKeyParkedUntilNeeded(t *testing.T) {
	t.Parallel()
	l, step, _ := parkedKey(t, hybrid.Config{IdleTimeout: time.Minute,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}}, false, 200)
	for range 30 { // three seconds offered nothing
		step(100 * time.Millisecond)
	}
	assert.Greater(t, l.ParkedFor("k"), 10*time.Second, "parked until its lease (a minute) or its going idle needs it")
}

// TestSurgeAfterAQuietPark: a key parked quiet for long, then offered a
// surge, forecasts the surge's rate, not the surge spread over the whole
// park: its early syncs would ask for too little (parked ten minutes, a
// six-thousandth of it).
func TestSurgeAfterAQuietPark(t *testing.T) {
	t.Parallel()
	l, step, _ := parkedKey(t, hybrid.Config{IdleTimeout: time.Minute,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}}, false, 200)
	for range 50 { // five seconds offered nothing
		step(100 * time.Millisecond)
	}
	require.Equal(t, 50, admit(t, l, "k", 50)) // 500 a second, for a round
	step(100 * time.Millisecond)
	assert.Greater(t, l.ForecastOf("k"), 100.0, "the surge's rate, in part (500 a second over one round)")
}
