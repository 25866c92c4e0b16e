package global_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// pipelineCounter counts pipelines sent to each Redis node: one pipeline
// to a node is one round trip.
type pipelineCounter struct {
	mu     sync.Mutex
	byNode map[string]int
}

func (p *pipelineCounter) hook(addr string) redis.Hook { return counterHook{p, addr} }

func (p *pipelineCounter) reset() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.byNode
	p.byNode = map[string]int{}
	return m
}

type counterHook struct {
	p    *pipelineCounter
	addr string
}

func (h counterHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h counterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h counterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.p.mu.Lock()
		h.p.byNode[h.addr]++
		h.p.mu.Unlock()
		return next(ctx, cmds)
	}
}

// clusterClient returns a cluster client that honours deadlines and
// counts its pipelines per node.
func clusterClient(t testing.TB, c *redistest.Cluster) (*redis.ClusterClient, *pipelineCounter) {
	t.Helper()
	cc := c.DeadlineClient(t)
	counter := &pipelineCounter{byNode: map[string]int{}}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(counter.hook(n.Options().Addr)) })
	return cc, counter
}

// keysOnEachMaster returns perMaster user keys whose lease state lives on
// each master.
func keysOnEachMaster(c *redistest.Cluster, perMaster int) map[*redistest.Server][]string {
	out := map[*redistest.Server][]string{}
	for i := 0; len(out) < len(c.Masters) || !full(out, perMaster); i++ {
		key := fmt.Sprintf("tenant-%d", i)
		m := c.MasterFor(global.DefaultPrefix + "{" + key + "}:lease")
		if len(out[m]) < perMaster {
			out[m] = append(out[m], key)
		}
	}
	return out
}

func full(m map[*redistest.Server][]string, n int) bool {
	for _, keys := range m {
		if len(keys) < n {
			return false
		}
	}
	return true
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	cc, counter := clusterClient(t, cl)
	byMaster := keysOnEachMaster(cl, 10)
	require.Len(t, byMaster, 3)

	t.Run("one round trip per master", func(t *testing.T) {
		r := newSyncer(t, cc)
		lim := fleet.Limit{Limit: 1000, Window: time.Second}
		req := &fleet.Request{Node: "n1", Interval: 100 * time.Millisecond}
		for _, keys := range byMaster {
			for _, k := range keys {
				req.Keys = append(req.Keys, fleet.Usage{Key: k, Limit: lim, Demand: 5})
			}
		}
		// Warm up: the client learns the slot map and opens connections.
		_, err := r.Sync(context.Background(), req)
		require.NoError(t, err)
		counter.reset()
		resp, err := r.Sync(context.Background(), req)
		require.NoError(t, err)
		for _, g := range resp.Grants {
			require.NoError(t, g.Err)
			assert.GreaterOrEqual(t, g.Lease, int64(5), "the demand, or more: slack")
		}
		trips := counter.reset()
		assert.Len(t, trips, 3, "every master is reached")
		for addr, n := range trips {
			assert.Equal(t, 1, n, "round trips to %s for %d keys", addr, len(req.Keys))
		}
	})

	t.Run("leases on every master", func(t *testing.T) {
		lim := fleet.Limit{Algorithm: local.TokenBucket, Limit: 1000, Window: time.Second, Burst: 100}
		var wg sync.WaitGroup
		var spent atomic.Int64
		for m, keys := range byMaster {
			wg.Go(func() {
				n := leaseStress(t, cc, keys[0], lim, 700*time.Millisecond)
				spent.Add(n)
				t.Logf("master %s: key %s spent %d", m.Addr, keys[0], n)
			})
		}
		wg.Wait()
		assert.Positive(t, spent.Load())
		for m, keys := range byMaster {
			n, err := m.Client(t).Exists(context.Background(), global.DefaultPrefix+"{"+keys[0]+"}:lease").Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "the lease state of %s lives on %s", keys[0], m.Addr)
		}
	})
}

// TestEmptyKeyOnCluster: the empty key's Redis keys are hl:{}:lease
// and hl:{}:lshards; "{}" is no hash tag, so they hash to different slots
// and every call on a Cluster fails with CROSSSLOT.
func TestEmptyKeyOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	r := newSyncer(t, cl.DeadlineClient(t))
	ctx := context.Background()
	lim := fleet.Limit{Limit: 100, Window: time.Minute}
	resp, err := r.Sync(ctx, &fleet.Request{Node: "n", Interval: time.Second,
		Keys: []fleet.Usage{{Key: "", Limit: lim, Demand: 10}}})
	require.NoError(t, err)
	assert.NoError(t, resp.Grants[0].Err, "lease for the empty key")
	_, err = r.Allow(ctx, "", lim, 1)
	assert.NoError(t, err, "strict Allow for the empty key")
}
