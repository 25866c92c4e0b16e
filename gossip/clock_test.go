package gossip_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

// jumpy is a manual clock whose wall time can jump while its monotonic
// reading does not, as a wall clock set by hand or by a bad NTP step.
type jumpy struct {
	*clock.Manual
	ahead time.Duration
}

func (c *jumpy) Now() time.Time { return c.Manual.Now().Add(c.ahead) }

// TestWallClockJumpOpensNothing steps a lone node's wall clock an hour
// ahead, then back, between syncs: its own windows follow the monotonic
// clock from its start, so what it spent stays counted and its leases
// stay within the limit. Before, one sync with the clock an hour ahead
// moved its own entry into a future window, its meter read 0, and it was
// leased the whole limit again.
func TestWallClockJumpOpensNothing(t *testing.T) {
	t.Parallel()
	for _, alg := range []local.Algorithm{local.SlidingWindow, local.TokenBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			clk := &jumpy{Manual: clock.NewManual(time.Unix(1_800_000_000, 0))}
			g, err := gossip.New(gossip.Config{Name: "only", BindAddr: "127.0.0.1", Clock: clk})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, g.Close()) })
			lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: time.Minute}
			leased := int64(0)
			// sync reports the last lease spent in full and asks for
			// the whole limit again.
			sync := func(consumed int64) int64 {
				resp, err := g.Sync(context.Background(), &fleet.Request{Node: "only", Interval: 100 * time.Millisecond,
					Keys: []fleet.Usage{{Key: "k", Limit: lim, Consumed: consumed, Demand: 1000}}})
				require.NoError(t, err)
				require.NoError(t, resp.Grants[0].Err)
				leased += resp.Grants[0].Lease
				return resp.Grants[0].Lease
			}
			last := sync(0)
			for _, ahead := range []time.Duration{time.Hour, 0, -time.Hour, 0} {
				clk.Advance(100 * time.Millisecond)
				clk.ahead = ahead
				last = sync(last)
			}
			// 400 ms at 1000 a minute refills about 7.
			assert.LessOrEqual(t, leased, int64(1000+10), "leased across the jumps, against 1000 a minute")
		})
	}
}
