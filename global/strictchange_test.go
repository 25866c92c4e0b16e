package global_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestStrictLimitChangeKeepsCount: a Strict token bucket whose limit
// changes (SetPolicies, a load factor, a limit given per call) keeps the
// requests it spent, not the fraction of its burst: 20 of 20 spent,
// raised to 30, 10 more; lowered to 10, none, and refilling at the new
// rate, its debt kept past the expiry the old limit gave the key. A
// state an earlier version wrote (a bare arrival time) is read as
// written under the limit in force. Before, a raise from 20 to 30 after
// 20 spent admitted nothing (the fraction kept: all of it).
func TestStrictLimitChangeKeepsCount(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.DeadlineClient(t)
	r := newSyncer(t, c)
	ctx := context.Background()
	per := func(n int64) fleet.Limit { return fleet.Limit{Limit: n, Window: time.Hour, Burst: n} }
	admitted := func(key string, lim fleet.Limit, n int) int {
		got := 0
		for range n {
			d, err := r.Allow(ctx, key, lim, 1)
			require.NoError(t, err)
			if d.Allowed {
				got++
			}
		}
		return got
	}
	require.Equal(t, 20, admitted("k", per(20), 25))
	assert.Equal(t, 10, admitted("k", per(30), 15), "raised to 30: 10 more")
	assert.Zero(t, admitted("k", per(10), 5), "lowered to 10: 30 spent")
	assert.Equal(t, 20, admitted("j", per(20), 20))
	assert.Equal(t, 20, admitted("j", per(40), 25), "raised to 40: 20 more")

	// Lowered from 30/s to 10/s with 30 spent: 3 s of debt, past the
	// expiry the old limit gave the key (1 s).
	perSec := func(n int64) fleet.Limit { return fleet.Limit{Limit: n, Window: time.Second, Burst: n} }
	require.Equal(t, 30, admitted("s", perSec(30), 30))
	assert.Zero(t, admitted("s", perSec(10), 1))
	time.Sleep(1100 * time.Millisecond)
	assert.Zero(t, admitted("s", perSec(10), 10), "the debt outlives the old expiry")

	// A bare arrival time: 5 tokens spent under the limit in force.
	now := redisNow(t, c)
	at := now.Add(5 * time.Hour / 20).UnixMicro()
	require.NoError(t, c.Set(ctx, global.RedisKeyForTest("hl:", "old", "gcra"), fmt.Sprint(at), time.Hour).Err())
	assert.Equal(t, 15, admitted("old", per(20), 20), "an earlier version's state: 5 of 20 spent")
}
