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

// TestLostReplyNotRetried: a connection breaks after Redis ran a sync's
// scripts and before their replies arrive. go-redis retries such a
// pipeline (MaxRetries, 3 by default), sending again scripts Redis has
// already run, and a report that is not idempotent (Series 0, as a
// node's first report to a key after its shards merge) was counted
// twice: 200 used for 100 reported. Sync's pipelines are never retried:
// the sync fails as unreachable, visibly, and the report counts once.
// (A report with a Series is idempotent, and its node sends it again.)
func TestLostReplyNotRetried(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	p, err := faultnet.NewProxy(s.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	o := s.Options()
	o.Addr, o.ContextTimeoutEnabled = p.Addr(), true
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	r, err := global.NewRedis(ctx, global.RedisConfig{Client: c})
	require.NoError(t, err)

	lim := fleet.Limit{Limit: 1000, Window: time.Hour} // no refill to speak of
	sync := func(consumed int64) (*fleet.Response, error) {
		return r.Sync(ctx, &fleet.Request{Node: "n", Interval: 100 * time.Millisecond,
			Keys: []fleet.Usage{{Key: "k", Limit: lim, Consumed: consumed}}})
	}
	_, err = sync(0) // the script is loaded, the connection open
	require.NoError(t, err)

	p.LoseReplies(1)
	_, err = sync(100)
	assert.ErrorIs(t, err, fleet.ErrUnreachable, "a sync whose reply is lost fails")

	resp, err := sync(0)
	require.NoError(t, err)
	assert.Equal(t, int64(100), resp.Grants[0].Used, "the report counted once")
}
