package global_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

var _ fleet.Syncer = (*global.Redis)(nil)

// TestStoreProtocol: hybrid finds, through store.Of, every optional
// interface it asks of a store on a Redis, though none is in Redis's
// public method set. (hybrid names no backend, so that a program that
// syncs by gossip links no Redis client: TestGossipOnlyLinksNoRedis.)
func TestStoreProtocol(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	x := store.Of(newSyncer(t, s.DeadlineClient(t)))
	for name, ok := range map[string]bool{
		"StrictDecider":       is[store.StrictDecider](x),
		"StrictCharger":       is[store.StrictCharger](x),
		"ShardDirectory":      is[store.ShardDirectory](x),
		"LeaseShardDirectory": is[store.LeaseShardDirectory](x),
		"Census":              is[store.Census](x),
	} {
		assert.True(t, ok, name)
	}
}

func is[T any](x any) bool { _, ok := x.(T); return ok }

// wrapped is a user's Syncer around a Redis, say to count its calls.
type wrapped struct{ r *global.Redis }

func (w wrapped) Sync(ctx context.Context, req *fleet.Request) (*fleet.Response, error) {
	return w.r.Sync(ctx, req)
}
func (w wrapped) Unwrap() fleet.Syncer { return w.r }

// TestStoreProtocolUnwrap: a Syncer that wraps a Redis and says so
// (Unwrap) offers what the Redis does.
func TestStoreProtocolUnwrap(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	x := store.Of(wrapped{newSyncer(t, s.DeadlineClient(t))})
	assert.True(t, is[store.StrictDecider](x))
	assert.True(t, is[store.LeaseShardDirectory](x))
	assert.False(t, is[store.StrictDecider](store.Of(wrappedBare{})), "no Unwrap, no Redis")
}

// wrappedBare is a Syncer that does not say what it wraps.
type wrappedBare struct{}

func (wrappedBare) Sync(context.Context, *fleet.Request) (*fleet.Response, error) { return nil, nil }
