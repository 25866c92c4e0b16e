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

// TestRestingKeysWakeApart: keys that came together (a node's start)
// rest on leases that lapse together, one Hold after their last sync
// (the IdleTimeout, for their first rest).
// Woken all at once, each Hold's round would carry every key, as a
// round without resting does every Interval (100,000 keys: 2.5 s a
// round, against an Interval of 100 ms). Each key wakes up to a
// quarter of its lease early, by its key's hash, so that no round
// carries more than a small part of them: 45 of 500 at most. Before:
// 454 of 500 in one round; up to a tenth early: 99.
func TestRestingKeysWakeApart(t *testing.T) {
	t.Parallel()
	const keys = 500
	var perRound []int
	s := syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i := range req.Keys {
			// A Syncer that lets every key rest: a lease for the Hold,
			// the key far from its limit.
			resp.Grants[i] = fleet.Grant{Lease: 1000, TTL: req.Keys[i].Hold, Remaining: 1000, Nodes: 1, Weight: 1}
		}
		perRound = append(perRound, len(req.Keys))
		return resp, nil
	})
	l, clk := manual(t, hybrid.Config{Syncer: s, IdleTimeout: 5 * time.Second, HotKeyRate: -1,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1000, Window: time.Second}}})
	ctx := context.Background()
	most := 0
	for r := range 150 { // 15 s: three IdleTimeouts
		for i := range keys {
			d, err := l.Allow(fmt.Sprint("k", i))
			require.NoError(t, err)
			require.True(t, d.Allowed())
		}
		perRound = perRound[:0]
		require.NoError(t, l.SyncOnce(ctx))
		if r >= 5 { // past the syncs before a key may rest
			for _, n := range perRound {
				most = max(most, n)
			}
		}
		clk.Advance(100 * time.Millisecond)
	}
	t.Logf("most keys in a round once they rest: %d of %d", most, keys)
	assert.LessOrEqual(t, most, keys/5, "keys woken in one round")
}

// TestSettledKeysRestLonger: a key asks to rest (fleet.Usage.Hold) for
// the IdleTimeout at first, and once in use for two IdleTimeouts since
// its first grant, for two minutes (or the IdleTimeout if longer) at
// most 10,000 Intervals, so that a key used for good costs the fleet a
// sync every two minutes or so.
// A key seen once never asks for more than the IdleTimeout: it is
// handed back and forgotten an IdleTimeout on, and its state in Redis,
// kept for about its Hold, outlives it by no more than before.
func TestSettledKeysRestLonger(t *testing.T) {
	t.Parallel()
	type asked struct {
		at   time.Duration
		hold time.Duration
	}
	holds := map[string][]asked{}
	var at time.Duration
	s := syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i, u := range req.Keys {
			// A Syncer that lets every key rest, as Redis lets a key
			// far from its limit.
			resp.Grants[i] = fleet.Grant{Lease: 1000, TTL: u.Hold, Remaining: 1000, Nodes: 1, Weight: 1}
			if u.Demand == 0 { // handed back
				resp.Grants[i].Lease, resp.Grants[i].TTL = 0, 0
			}
			holds[u.Key] = append(holds[u.Key], asked{at, u.Hold})
		}
		return resp, nil
	})
	l, clk := manual(t, hybrid.Config{Syncer: s, IdleTimeout: 5 * time.Second, HotKeyRate: -1,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}})
	ctx := context.Background()
	for r := range 300 { // 30 s
		if r%10 == 0 {
			_, err := l.Allow("busy") // once a second, for good
			require.NoError(t, err)
		}
		if r == 0 {
			_, err := l.Allow("once")
			require.NoError(t, err)
		}
		require.NoError(t, l.SyncOnce(ctx))
		clk.Advance(100 * time.Millisecond)
		at += 100 * time.Millisecond
	}
	require.NotEmpty(t, holds["once"])
	for _, a := range holds["once"] {
		assert.Equal(t, 5*time.Second, a.hold, "a key seen once asks for the IdleTimeout (at %v)", a.at)
	}
	assert.Less(t, holds["once"][len(holds["once"])-1].at, 6*time.Second, "handed back and forgotten")
	busy := holds["busy"]
	for _, a := range busy {
		want := 5 * time.Second // the IdleTimeout
		if a.at > 10*time.Second+200*time.Millisecond {
			want = 2 * time.Minute // under 10,000 Intervals
		}
		if a.at < 10*time.Second-200*time.Millisecond || a.at > 10*time.Second+200*time.Millisecond {
			assert.Equal(t, want, a.hold, "busy's Hold at %v", a.at)
		}
	}
	assert.Equal(t, 2*time.Minute, busy[len(busy)-1].hold)
}

// TestParkedKeyRunningLowSyncs: a resting key whose lease runs low asks
// for an early sync; with ManualSync (or the early queue full) no early
// sync comes, and the next round must sync it. A parked key (see rests)
// skipped that round, and went on refusing on a spent lease until its
// park ran out.
func TestParkedKeyRunningLowSyncs(t *testing.T) {
	t.Parallel()
	synced := 0
	s := syncFunc(func(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
		resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
		for i, u := range req.Keys {
			resp.Grants[i] = fleet.Grant{Lease: u.Demand, TTL: u.Hold, Remaining: 1_000_000, Nodes: 1, Weight: 1}
			if u.Key == "k" {
				synced++
			}
		}
		return resp, nil
	})
	l, clk := manual(t, hybrid.Config{Syncer: s, HotKeyRate: -1,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1_000_000, Window: time.Second}}})
	ctx := context.Background()
	for i := range 1000 { // other keys, so that "k" is seldom the round's resting key synced longest ago
		_, err := l.Allow(fmt.Sprint("other-", i))
		require.NoError(t, err)
	}
	require.Equal(t, 1, admit(t, l, "k", 1))
	for range 5 { // past the syncs before a key may rest
		require.NoError(t, l.SyncOnce(ctx))
		clk.Advance(100 * time.Millisecond)
	}
	require.NoError(t, l.SyncOnce(ctx)) // k rests, parked
	synced = 0
	clk.Advance(10 * time.Millisecond)
	assert.Equal(t, 760, admit(t, l, "k", 760), "its lease of 1,000 (its demand), to under its low-water mark (250)")
	require.NoError(t, l.SyncOnce(ctx))
	assert.Equal(t, 1, synced, "the round syncs a key whose lease runs low")
	assert.Equal(t, 500, admit(t, l, "k", 500), "its new lease")
}
