package hybrid_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestShardNamesUnreachable is an attack on a real Redis: a Strict key,
// tenant:victim, is split into shards across the fleet, and a client
// spends, within its own limit, on keys spelt as the victim's shards
// once were (the key, '#', a number), and as they might be (with '%#',
// or '%' spelt %25). No user key may reach a shard: the victim must
// still be admitted its whole limit. When a shard's name was the key
// and '#', the victim was held to a handful of its 120.
func TestShardNamesUnreachable(t *testing.T) {
	t.Parallel()
	const limit, victim = 120, "tenant:victim"
	s := redistest.StartServer(t)
	l := fleettest.Limiters(t, 1, func(int) hybrid.Config {
		return hybrid.Config{Node: "n", Syncer: redisSyncer(t, s), Interval: 50 * time.Millisecond, HotKeyRate: -1,
			Policies: []hybrid.Policy{{Name: "s", Mode: hybrid.Strict, Limit: limit, Window: time.Minute}}}
	})[0]
	n, err := redisSyncer(t, s).MarkShards(context.Background(), victim, hybrid.DefaultHotKeyShards, time.Minute)
	require.NoError(t, err)
	require.Equal(t, hybrid.DefaultHotKeyShards, n)

	spent := 0
	for i := range 200 {
		for _, sep := range []string{"#", "%#", "%25#"} {
			d, err := l.AllowN(victim+sep+strconv.Itoa(i), limit)
			require.NoError(t, err)
			if d.Allowed() {
				spent++
			}
		}
	}
	require.Equal(t, 600, spent, "the attacker spends within its keys' limits")

	admitted := 0
	for range limit {
		if d, err := l.Allow(victim); err == nil && d.Allowed() {
			admitted++
		}
	}
	assert.Equal(t, limit, admitted, "the victim is admitted its whole limit")
	own, err := s.Client(t).Exists(context.Background(), global.DefaultPrefix+"{"+victim+"}:gcra").Result()
	require.NoError(t, err)
	assert.Zero(t, own, "the victim was decided on its shards, not on its own key")
}
