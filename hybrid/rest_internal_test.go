package hybrid

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/clock"
)

// TestOldest: the n resting keys synced longest ago, ties by key, in
// that order, after what out holds already.
func TestOldest(t *testing.T) {
	t.Parallel()
	k := func(key string, at int64) *keyState { return &keyState{key: key, lastSync: at} }
	resting := []*keyState{k("e", 5), k("b", 2), k("d", 2), k("a", 9), k("c", 1), k("f", 2)}
	names := func(ks []*keyState) (s []string) {
		for _, k := range ks {
			s = append(s, k.key)
		}
		return s
	}
	for _, c := range []struct {
		n    int
		want []string
	}{
		{1, []string{"x", "c"}},
		{3, []string{"x", "c", "b", "d"}},
		{16, []string{"x", "c", "b", "d", "f", "e", "a"}},
	} {
		assert.Equal(t, c.want, names(oldest([]*keyState{k("x", 0)}, resting, c.n)), "n=%d", c.n)
	}
	assert.Empty(t, oldest(nil, nil, 16))
}

// restingFleet lets every key rest: a lease of its demand for its Hold,
// the key far from its limit.
type restingFleet struct{}

func (restingFleet) Sync(_ context.Context, req *fleet.Request) (*fleet.Response, error) {
	resp := &fleet.Response{Grants: make([]fleet.Grant, len(req.Keys))}
	for i, u := range req.Keys {
		resp.Grants[i] = fleet.Grant{Lease: u.Demand, TTL: u.Hold, Remaining: 1_000_000, Nodes: 1, Weight: 1}
	}
	return resp, nil
}

// TestParkEndsWithTheLagOfNow: a key parked while its loop kept time is
// looked at again, with the margin of now, once the loop runs late: its
// park, reckoned with no lag, would have let its lease lapse before the
// round after next synced it (a park lasts up to its lease's end, ten
// minutes and more, where it lasted a second).
func TestParkEndsWithTheLagOfNow(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	l, err := New(Config{Node: "n", Syncer: restingFleet{}, ManualSync: true, HotKeyRate: -1,
		Clock: clk, IdleTimeout: time.Hour, Policies: []Policy{{Name: "p", Limit: 1_000_000, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for i := range 100 { // others, so that a round's one resting key synced is not always k
		_, err = l.Allow(fmt.Sprint("other-", i))
		require.NoError(t, err)
	}
	_, err = l.Allow("k")
	require.NoError(t, err)
	k, ok := l.keys.Load("k")
	require.True(t, ok)
	parked := func() bool {
		l.syncMu.Lock()
		defer l.syncMu.Unlock()
		return k.parkAt > l.now()+int64(time.Minute)
	}
	// Past the syncs before a key may rest, and its first rest, parked
	// for its lease at the rate its one request read over the early-sync
	// gap (a lease of 1,000 at 22/s: 45 s); then parked for long.
	for round := 0; !parked(); round++ {
		require.Less(t, round, 60, "k rests, parked for long")
		require.NoError(t, l.SyncOnce(context.Background()))
		clk.Advance(100 * time.Millisecond)
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	now := l.now()
	require.True(t, l.rests(k, now, false))
	l.syncs.pace.lag = k.expires - now // the loop now runs as late as k's lease has left
	assert.False(t, l.rests(k, now, false), "looked at again: its lease would lapse before its sync")
}
