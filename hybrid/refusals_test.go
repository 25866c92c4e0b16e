package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// TestRefusedBy: each refusal is counted under its reason, and the
// reasons add up to Refused. A key whose lease ran dry while the fleet
// had plenty is refused for its lease; one whose fleet has nothing left,
// for the limit; with the fleet gone and the policy FailClosed, for
// being unreachable. Before, Stats said only how many were refused.
func TestRefusedBy(t *testing.T) {
	t.Parallel()
	s := newScripted(1_000_000, "roomy", "closed:k")
	s.pool["spent"] = 5
	l, clk := manual(t, hybrid.Config{Syncer: s, Policies: []hybrid.Policy{
		{Name: "api", Limit: 1000, Window: time.Second},
		{Name: "closed", Prefix: "closed:", Limit: 1_000_000, Window: time.Second, OnUnreachable: hybrid.FailClosed},
	}})
	ctx := context.Background()
	sync := func() {
		clk.Advance(100 * time.Millisecond)
		require.NoError(t, l.SyncOnce(ctx))
	}
	// A key of a 1,000 a second limit offered 1,500 at once: its lease
	// covers at most the burst, and the rest are refused for the lease,
	// the scripted fleet holding a million.
	for range 5 {
		admit(t, l, "roomy", 1)
		admit(t, l, "closed:k", 1)
		admit(t, l, "spent", 1)
		sync()
	}
	admit(t, l, "roomy", 1500)
	d, err := l.AllowN("roomy", 5000) // more than the bucket holds
	require.NoError(t, err)
	require.False(t, d.Allowed())
	// The fleet has 5 for "spent", all leased: the rest are refused for
	// the limit.
	admit(t, l, "spent", 50)
	sync()
	admit(t, l, "spent", 50)
	sync()
	by := func(policy string) (map[string]uint64, uint64) {
		for _, p := range l.Stats().Policies {
			if p.Name == policy {
				return p.RefusedBy, p.Refused
			}
		}
		t.Fatalf("no policy %q", policy)
		return nil, 0
	}
	api, refused := by("api")
	t.Logf("api: %v of %d", api, refused)
	assert.Positive(t, api["lease"], "roomy's lease ran dry")
	assert.GreaterOrEqual(t, api["limit"], uint64(50), "spent's fleet had nothing left")
	assert.Equal(t, uint64(5000), api["cost"], "a request larger than the policy allows")
	assert.Equal(t, refused, api["lease"]+api["limit"]+api["unreachable"]+api["key_error"]+api["cost"], "the reasons add up")

	// The fleet gone: once its lease lapses, a FailClosed key is refused
	// for being unreachable.
	s.set(errDown, 1)
	for range 10 {
		clk.Advance(100 * time.Millisecond)
		_ = l.SyncOnce(ctx)
	}
	admit(t, l, "closed:k", 20)
	closed, refused := by("closed")
	t.Logf("closed: %v of %d", closed, refused)
	assert.Equal(t, uint64(20), closed["unreachable"])
	assert.Equal(t, refused, closed["unreachable"]+closed["lease"]+closed["limit"])
}
