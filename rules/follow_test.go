package rules_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/rules"
)

// TestFollow: two nodes follow the rules document in a real Redis. The
// first seeds it with its rules; the second takes the fleet's over its
// own file; a change published on one is in force on the other within a
// second, a stale change is refused, and a document the nodes cannot
// parse is skipped with the rules in force staying. A node started after
// every other stopped takes the stored rules: they outlive the nodes.
func TestFollow(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	doc := func() *global.Document {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c})
		require.NoError(t, err)
		return r.Document("rules")
	}
	var logMu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	node := func(file string) (*rules.Limiter, *global.Document, func()) {
		store := doc()
		r := newLimiter(t, file)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Follow(ctx, store, 10*time.Millisecond, logger) }()
		return r, store, func() { cancel(); <-done }
	}
	limitOf := func(r *rules.Limiter) int64 { return r.Rules().Policies()[0].Limit }
	a, store, stopA := node("rules:\n  - {name: a, mode: local, key: [tenant], limit: 5, window: 1h}\n")
	require.Eventually(t, func() bool { return a.Version() > 0 }, 5*time.Second, 5*time.Millisecond, "a seeds the fleet")
	seed := a.Version()
	b, _, stopB := node("rules:\n  - {name: a, mode: local, key: [tenant], limit: 99, window: 1h}\n")
	require.Eventually(t, func() bool { return limitOf(b) == 5 }, 5*time.Second, 5*time.Millisecond, "b takes the fleet's rules")

	start := time.Now()
	v, err := a.Publish(context.Background(), store, []byte("rules:\n  - {name: a, mode: local, key: [tenant], limit: 7, window: 1h}\n"), seed)
	require.NoError(t, err)
	assert.Equal(t, seed+1, v)
	require.Eventually(t, func() bool { return limitOf(b) == 7 }, time.Second, time.Millisecond, "in force on b within a second")
	t.Logf("a change published on one node was in force on the other after %v", time.Since(start))

	_, err = b.Publish(context.Background(), store, []byte("rules:\n  - {name: a, mode: local, key: [tenant], limit: 1, window: 1h}\n"), seed)
	require.ErrorIs(t, err, fleet.ErrVersion, "made to the seed, not the version after")
	require.ErrorIs(t, err, rules.ErrConflict)
	_, err = b.Publish(context.Background(), store, []byte("rules: nonsense"), seed+1)
	require.ErrorIs(t, err, rules.ErrInvalid, "checked before it is saved")

	_, err = store.Save(context.Background(), []byte("rules: [{name: a, key: [tenant], limit: -1}]"), seed+1) // as a broken node might
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return bytes.Contains(logs.Bytes(), []byte("the fleet's rules refused"))
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(7), limitOf(a), "the rules in force stay")
	assert.Equal(t, int64(7), limitOf(b))

	stopA()
	stopB()
	_, err = store.Save(context.Background(), []byte("rules:\n  - {name: a, mode: local, key: [tenant], limit: 8, window: 1h}\n"), seed+2)
	require.NoError(t, err)
	c, _, stopC := node("rules:\n  - {name: a, mode: local, key: [tenant], limit: 1, window: 1h}\n")
	defer stopC()
	require.Eventually(t, func() bool { return limitOf(c) == 8 }, 5*time.Second, 5*time.Millisecond, "the stored rules outlive the nodes")
	assert.Equal(t, seed+3, c.Version())
}
