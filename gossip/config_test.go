package gossip_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
)

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		field string
		cfg   gossip.Config
	}{
		{"Name", gossip.Config{Name: strings.Repeat("n", 256)}},
		{"BindAddr", gossip.Config{BindAddr: "localhost"}},
		{"BindPort", gossip.Config{BindPort: 70000}},
		{"AdvertiseAddr", gossip.Config{AdvertiseAddr: "nowhere"}},
		{"AdvertisePort", gossip.Config{AdvertisePort: -1}},
		{"SecretKey", gossip.Config{SecretKey: []byte("short")}},
		{"Label", gossip.Config{Label: strings.Repeat("l", 256)}},
		{"GossipInterval", gossip.Config{GossipInterval: -time.Second}},
		{"Grace", gossip.Config{Grace: -time.Second}},
		{"MaxKeys", gossip.Config{MaxKeys: -1}},
		{"MaxSnapshotKeys", gossip.Config{MaxSnapshotKeys: 10_001}},
		{"Seeds", gossip.Config{Seeds: []string{"no-port"}}},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			t.Parallel()
			_, err := gossip.New(tt.cfg)
			require.ErrorIs(t, err, gossip.ErrInvalidConfig)
			assert.Contains(t, err.Error(), "Config."+tt.field)
		})
	}
}

func TestSyncRejectsBadRequests(t *testing.T) {
	t.Parallel()
	g, err := gossip.New(gossip.Config{BindAddr: "127.0.0.1"})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()
	ctx := context.Background()
	for _, req := range []*fleet.Request{nil, {Interval: 0}, {Interval: time.Second, Shares: 7}} {
		_, err := g.Sync(ctx, req)
		assert.ErrorIs(t, err, fleet.ErrInvalid)
	}
	resp, err := g.Sync(ctx, &fleet.Request{Interval: time.Second, Keys: []fleet.Usage{{Key: "k", Limit: fleet.Limit{Limit: 0, Window: time.Second}}}})
	require.NoError(t, err)
	assert.ErrorIs(t, resp.Grants[0].Err, fleet.ErrInvalid, "a bad limit fails its key only")
}

// TestUnreachableWhenCutOff checks that a node whose seeds never answer
// reports the fleet unreachable, so the Limiter falls back to its fail
// mode instead of granting itself the whole limit.
func TestUnreachableWhenCutOff(t *testing.T) {
	t.Parallel()
	g, err := gossip.New(gossip.Config{BindAddr: "127.0.0.1", Seeds: []string{"127.0.0.1:1"}, TCPTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	_, err = g.Sync(context.Background(), &fleet.Request{Interval: time.Second, Keys: []fleet.Usage{{Key: "k", Limit: window, Demand: 1}}})
	assert.ErrorIs(t, err, fleet.ErrUnreachable)
	require.NoError(t, g.Close())
	_, err = g.Sync(context.Background(), &fleet.Request{Interval: time.Second})
	assert.True(t, errors.Is(err, fleet.ErrUnreachable), "closed")
}
