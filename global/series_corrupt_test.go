package global_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestCorruptSeriesFields: a node's series fields hold what no script
// writes (Total and Series are at most MaxLimit, and whole): the key must
// fail as corrupt. A c:<node> of 2^60 used to make every report of the
// series count nothing.
func TestCorruptSeriesFields(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	for _, alg := range []global.Algorithm{global.TokenBucket, global.SlidingWindow} {
		lim := global.Limit{Algorithm: alg, Limit: 100, Window: time.Minute}
		for i, bad := range []map[string]string{
			{"k:n": "5", "c:n": "1152921504606846976"},
			{"k:n": "5", "c:n": "9007199254740994"},
			{"k:n": "5", "c:n": "2.5"},
			{"k:n": "1152921504606846976", "c:n": "0"},
			{"k:n": "2.5", "c:n": "0"},
			{"k:n": "0", "c:n": "0"},
		} {
			key := fmt.Sprintf("series-corrupt-%v-%d", alg, i)
			require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"), bad).Err())
			resp, err := r.Sync(ctx, &global.Request{Node: "n", Interval: time.Second,
				Keys: []global.Usage{{Key: key, Limit: lim, Consumed: 50, Demand: 10, Series: 5, Total: 50}}})
			require.NoError(t, err)
			g := resp.Grants[0]
			wantCorrupt(t, g.Err, g.Lease > 0, fmt.Sprintf("%v %v", alg, bad))
		}
	}
}

// TestCorruptReserve: a reserve (p:<node>) holding what no script
// writes, the node's own or a silent node's, fails the key as corrupt.
func TestCorruptReserve(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	c := s.Client(t)
	r := newSyncer(t, s.DeadlineClient(t))
	ctx := context.Background()
	now := redisNow(t, c).UnixMicro()
	lim := global.Limit{Limit: 100, Window: time.Minute}
	for i, v := range append(garbage[:len(garbage):len(garbage)], "-1") {
		for j, f := range []string{"p:n", "p:other"} {
			key := fmt.Sprintf("reserve-corrupt-%d-%d", i, j)
			silent := fmt.Sprint(now - int64(time.Minute/time.Microsecond)) // stale, within keep
			require.NoError(t, c.HSet(ctx, global.RedisKeyForTest("hl:", key, "lease"),
				"s:other", silent, "d:other", "5", f, v).Err())
			resp, err := r.Sync(ctx, &global.Request{Node: "n", Interval: time.Second, Fallback: []partition.Step{{Until: time.Hour, Factor: 1}},
				Keys: []global.Usage{{Key: key, Limit: lim, Consumed: 10, Demand: 10}}})
			require.NoError(t, err)
			g := resp.Grants[0]
			wantCorrupt(t, g.Err, g.Lease > 0, fmt.Sprintf("%s=%q", f, v))
		}
	}
}
