package global_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestCharge checks Redis.Charge on real Redis, for both algorithms: a
// charge counts as admitted requests (charging twice charges twice), a
// charge of 0 changes nothing, a negative one is that charge's error,
// and no charge takes a bucket below empty, so that it refills from
// empty at its rate rather than owing for an outage long past.
func TestCharge(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	r := newSyncer(t, srv.DeadlineClient(t))
	ctx := context.Background()
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			lim := fleet.Limit{Algorithm: alg, Limit: 100, Window: time.Hour}
			key := "charge-" + alg.String()
			errs, err := r.Charge(ctx, []store.StrictCharge{{Key: key, Limit: lim, N: 30}, {Key: key, Limit: lim, N: 0}, {Key: key, Limit: lim, N: -1}})
			require.NoError(t, err)
			require.Len(t, errs, 3)
			assert.NoError(t, errs[0])
			assert.NoError(t, errs[1])
			assert.ErrorIs(t, errs[2], fleet.ErrInvalid)
			errs, err = r.Charge(ctx, []store.StrictCharge{{Key: key, Limit: lim, N: 20}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			d, err := r.Allow(ctx, key, lim, 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			assert.InDelta(t, 100-30-20-1, d.Remaining, 1, "two charges and one decision")
		})
	}
	t.Run("capped at empty", func(t *testing.T) {
		lim := fleet.Limit{Limit: 10, Window: time.Second} // a token every 100ms
		errs, err := r.Charge(ctx, []store.StrictCharge{{Key: "capped", Limit: lim, N: 1_000_000}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		d, err := r.Allow(ctx, "capped", lim, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "empty")
		time.Sleep(250 * time.Millisecond)
		d, err = r.Allow(ctx, "capped", lim, 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "refilled from empty, not from a million behind")
	})
}
