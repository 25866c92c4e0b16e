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
// rest on leases that lapse together, one Hold after their last sync.
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
			resp.Grants[i] = fleet.Grant{Lease: 1000, TTL: req.Hold, Remaining: 1000, Nodes: 1, Weight: 1}
		}
		perRound = append(perRound, len(req.Keys))
		return resp, nil
	})
	l, clk := manual(t, hybrid.Config{Syncer: s, IdleTimeout: 5 * time.Second, HotKeyRate: -1,
		Policies: []hybrid.Policy{{Name: "api", Limit: 1000, Window: time.Second}}})
	ctx := context.Background()
	most := 0
	for r := range 150 { // 15 s: three Holds
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
