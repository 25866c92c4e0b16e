package global_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// oneKey is a request for one key, as a node's first sync sends it.
func oneKey(key string) *fleet.Request {
	return &fleet.Request{Node: "n", Interval: time.Second,
		Keys: []fleet.Usage{{Key: key, Limit: fleet.Limit{Limit: 10, Window: time.Second}, Demand: 1}}}
}

// TestNewRedisWithoutRedis: a service starts while Redis is down, the
// outage the library is built to survive. NewRedis succeeds; syncs fail
// as unreachable, naming the address, until Redis is back.
func TestNewRedisWithoutRedis(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	s.Stop()
	ctx := context.Background()
	r, err := global.NewRedis(ctx, global.RedisConfig{Client: s.DeadlineClient(t), Timeout: 300 * time.Millisecond})
	require.NoError(t, err, "Redis down at start-up")

	_, err = r.Sync(ctx, oneKey("k"))
	require.ErrorIs(t, err, fleet.ErrUnreachable)
	assert.Contains(t, err.Error(), s.Addr, "the error names the address")
	assert.Contains(t, err.Error(), "did not answer in time", "and the cause")
	_, err = r.Allow(ctx, "k", fleet.Limit{Limit: 10, Window: time.Second}, 1)
	require.ErrorIs(t, err, fleet.ErrUnreachable)
	assert.Contains(t, err.Error(), s.Addr)

	s.Restart(t)
	require.Eventually(t, func() bool {
		resp, err := r.Sync(ctx, oneKey("k"))
		return err == nil && resp.Grants[0].Err == nil && resp.Grants[0].Lease > 0
	}, 5*time.Second, 20*time.Millisecond, "syncs work once Redis is up")
}

// TestNewRedisFarAway: a Redis 60 ms away (a round trip) is no obstacle
// to start-up, and the first sync takes two round trips: EVALSHA finds
// no script, EVAL sends it.
func TestNewRedisFarAway(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	p, err := faultnet.NewProxy(s.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	p.SetDelay(30 * time.Millisecond) // each way
	o := s.Options()
	o.Addr, o.ContextTimeoutEnabled = p.Addr(), true
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()

	start := time.Now()
	r, err := global.NewRedis(ctx, global.RedisConfig{Client: c}) // the default 500 ms timeout
	took := time.Since(start)
	require.NoError(t, err)
	start = time.Now()
	resp, err := r.Sync(ctx, oneKey("far"))
	first := time.Since(start)
	require.NoError(t, err)
	require.NoError(t, resp.Grants[0].Err)
	start = time.Now()
	_, err = r.Sync(ctx, oneKey("far"))
	next := time.Since(start)
	require.NoError(t, err)
	t.Logf("Redis 60 ms away: NewRedis %v, first sync %v, next %v", took.Round(time.Millisecond),
		first.Round(time.Millisecond), next.Round(time.Millisecond))
}
