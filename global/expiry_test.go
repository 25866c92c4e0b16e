package global_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestLeaseStateExpiry checks that a key's lease state outlives its
// TTL (two windows and ten intervals) past every sync, without a PEXPIRE
// at every sync: the expiry is set to twice the TTL when less than the
// TTL is left, which the state's field x tells; an x further off than
// twice the TTL is not believed.
func TestLeaseStateExpiry(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Algorithm: local.TokenBucket, Limit: 100, Window: time.Second}
	ttl := 2*time.Second + 10*time.Second + time.Millisecond // sync1's interval is 1 s
	state := global.RedisKeyForTest("hl:", "expiry", "lease")
	pttl := func() time.Duration {
		d, err := c.PTTL(ctx, state).Result()
		require.NoError(t, err)
		return d
	}

	sync1(t, r, "n", "expiry", lim, 0, 10)
	first := pttl()
	assert.Greater(t, first, ttl, "set to twice the TTL")
	assert.LessOrEqual(t, first, 2*ttl)

	s.ResetStats(t)
	sync1(t, r, "n", "expiry", lim, 1, 10)
	assert.LessOrEqual(t, pttl(), first, "not renewed while more than the TTL is left")
	assert.Zero(t, s.Commands(t)["pexpire"], "no PEXPIRE")

	// Less than the TTL left, as x says: renewed.
	now := redisNow(t, c)
	require.NoError(t, c.HSet(ctx, state, "x", strconv.FormatInt(now.Add(time.Second).UnixMicro(), 10)).Err())
	require.NoError(t, c.PExpire(ctx, state, time.Second).Err())
	sync1(t, r, "n", "expiry", lim, 1, 10)
	assert.Greater(t, pttl(), ttl, "renewed")

	// An x no lease wrote at this clock (a day ahead: Redis's clock went
	// back, or a forged value) does not hold the expiry back.
	now = redisNow(t, c)
	require.NoError(t, c.HSet(ctx, state, "x", strconv.FormatInt(now.Add(24*time.Hour).UnixMicro(), 10)).Err())
	require.NoError(t, c.PExpire(ctx, state, time.Second).Err())
	sync1(t, r, "n", "expiry", lim, 1, 10)
	assert.Greater(t, pttl(), ttl, "renewed despite x")
	assert.LessOrEqual(t, pttl(), 2*ttl)
}
