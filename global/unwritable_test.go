package global_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestUnwritableIsUnreachable puts a real Redis in each state where it
// answers but takes no writes: out of memory under the default
// noeviction policy, refusing writes for want of replicas, after a
// failed snapshot, busy in a long script. A fleet that takes no writes
// cannot lease or decide: every call must fail as unreachable, so the
// caller's breaker opens and it limits on its own, never as a mistake
// in the request, which would drop the report and refuse the key.
func TestUnwritableIsUnreachable(t *testing.T) {
	t.Parallel()
	lim := fleet.Limit{Limit: 100, Window: time.Second}
	tests := []struct {
		name   string
		prefix string                      // of Redis's error
		args   func(t *testing.T) []string // redis-server's, if any
		// refuse puts Redis in the state, and returns what ends it.
		refuse func(t *testing.T, s *redistest.Server, c *redis.Client) (undo func())
	}{
		{"out of memory", "OOM", nil, func(t *testing.T, s *redistest.Server, c *redis.Client) func() {
			require.NoError(t, c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err())
			require.NoError(t, c.ConfigSet(context.Background(), "maxmemory", "1").Err())
			return func() { require.NoError(t, c.ConfigSet(context.Background(), "maxmemory", "0").Err()) }
		}},
		{"no replicas", "NOREPLICAS", nil, func(t *testing.T, s *redistest.Server, c *redis.Client) func() {
			require.NoError(t, c.ConfigSet(context.Background(), "min-replicas-to-write", "1").Err())
			return func() { require.NoError(t, c.ConfigSet(context.Background(), "min-replicas-to-write", "0").Err()) }
		}},
		{"snapshot failed", "MISCONF", func(t *testing.T) []string {
			// Redis 7 refuses CONFIG SET dir: the directory is set here,
			// and removed below.
			dir := filepath.Join(t.TempDir(), "snapshots")
			require.NoError(t, os.Mkdir(dir, 0o755))
			return []string{"--dir", dir, "--save", "3600 1"}
		}, func(t *testing.T, s *redistest.Server, c *redis.Client) func() {
			// A snapshot into a directory that is gone fails, even as root.
			ctx := context.Background()
			dir, err := c.ConfigGet(ctx, "dir").Result()
			require.NoError(t, err)
			require.NoError(t, os.Remove(dir["dir"]))
			require.NoError(t, c.BgSave(ctx).Err())
			require.Eventually(t, func() bool {
				info, err := c.Info(ctx, "persistence").Result()
				return err == nil && strings.Contains(info, "rdb_last_bgsave_status:err")
			}, 5*time.Second, 10*time.Millisecond)
			return func() { require.NoError(t, c.ConfigSet(ctx, "save", "").Err()) }
		}},
		{"busy script", "BUSY", nil, func(t *testing.T, s *redistest.Server, c *redis.Client) func() {
			ctx := context.Background()
			require.NoError(t, c.ConfigSet(ctx, "busy-reply-threshold", "20").Err())
			done := make(chan struct{})
			go func() {
				defer close(done)
				o := s.Options()
				o.ReadTimeout = 5 * time.Second
				busy := redis.NewClient(o)
				defer busy.Close()
				_ = busy.Eval(ctx, `local s = redis.call('TIME')
repeat local t = redis.call('TIME') until (t[1] - s[1]) * 1000000 + (t[2] - s[2]) > 800000
return 1`, nil).Err()
			}()
			require.Eventually(t, func() bool {
				return redis.HasErrorPrefix(c.Ping(ctx).Err(), "BUSY")
			}, 2*time.Second, 5*time.Millisecond)
			return func() { <-done }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var args []string
			if tt.args != nil {
				args = tt.args(t)
			}
			s := redistest.StartServer(t, args...)
			admin := s.Client(t)
			r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: s.DeadlineClient(t), Timeout: time.Second})
			require.NoError(t, err)
			ctx := context.Background()
			// Two keys, one known to Redis already: the whole sync fails.
			_, err = r.Sync(ctx, oneKey("known"))
			require.NoError(t, err)
			req := oneKey("known")
			req.Keys = append(req.Keys, fleet.Usage{Key: "new", Limit: lim, Demand: 5})

			undo := tt.refuse(t, s, admin)
			resp, err := r.Sync(ctx, req)
			if err == nil {
				t.Fatalf("Sync succeeded; grants %+v", resp.Grants)
			}
			require.ErrorIs(t, err, fleet.ErrUnreachable)
			assert.Contains(t, err.Error(), tt.prefix)
			assert.Contains(t, err.Error(), s.Addr)
			t.Logf("Sync: %v", err)
			_, err = r.Allow(ctx, "known", lim, 1)
			require.ErrorIs(t, err, fleet.ErrUnreachable)
			assert.Contains(t, err.Error(), tt.prefix)

			undo()
			require.Eventually(t, func() bool {
				resp, err := r.Sync(ctx, req)
				return err == nil && resp.Grants[1].Err == nil
			}, 5*time.Second, 10*time.Millisecond, "writes are taken again")
		})
	}
}

// TestCorruptValueIsNotAnOutage: one key's corrupt state whose text
// holds "connection" must fail that key with ErrCorrupt, not the whole
// Sync with ErrUnreachable (which opens the breaker for every key).
func TestCorruptValueIsNotAnOutage(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 100, Window: time.Minute}
	require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", "bad", "lease"), "tokens", "connection").Err())
	resp, err := r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second,
		Keys: []fleet.Usage{{Key: "fine", Limit: lim, Demand: 10}, {Key: "bad", Limit: lim, Demand: 10}}})
	require.NoError(t, err, "one key's corrupt state failed the whole Sync")
	assert.NoError(t, resp.Grants[0].Err)
	assert.ErrorIs(t, resp.Grants[1].Err, fleet.ErrCorrupt)
}
