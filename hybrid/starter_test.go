package hybrid_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestNewKeyFirstBurst: a fleet of six on a real Redis, a new key with a
// limit of 60/s, and a first burst of concurrent requests on every node
// before any of them has synced the key. A node's starter credit is its
// part of the burst (60 over the 6 nodes it has seen on other keys), so
// 8 concurrent first requests on one node are all admitted (1 was, with
// a starter of one token), and the fleet's starters together hold at
// most the burst, however hard every node is hit.
func TestNewKeyFirstBurst(t *testing.T) {
	t.Parallel()
	s := redistest.StartServer(t)
	p := hybrid.Policy{Name: "api", Limit: 60, Window: time.Second}
	nodes := redisFleet(t, s, 6, fleet.DemandWeighted, p)
	// The fleet is running: every node syncs a key the others share, and
	// so learns the fleet's size.
	require.Eventually(t, func() bool {
		for _, l := range nodes {
			if _, err := l.Allow("warm"); err != nil {
				return false
			}
		}
		return fleetSeen(t, nodes, "warm") == len(nodes)
	}, 5*time.Second, 20*time.Millisecond, "every node sees the fleet")

	burst := func(l *hybrid.Limiter, key string, n int) int {
		var admitted atomic.Int64
		var start, wg sync.WaitGroup
		start.Add(1)
		for range n {
			wg.Go(func() {
				start.Wait()
				d, err := l.Allow(key)
				assert.NoError(t, err)
				if d.Allowed() {
					admitted.Add(1)
				}
			})
		}
		start.Done()
		wg.Wait()
		return int(admitted.Load())
	}
	assert.Equal(t, 8, burst(nodes[0], "new", 8), "8 concurrent first requests for a new key, limit 60/s, fleet of 6")

	// Every node hit at once with three times its part: the starters
	// hold the burst, and the leases that follow come out of what is
	// left of it, plus what refills meanwhile.
	began := time.Now()
	total := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, l := range nodes {
		wg.Go(func() {
			n := burst(l, "hot", 30)
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	refill := int(60 * time.Since(began).Seconds())
	t.Logf("6 nodes x 30 concurrent first requests: %d admitted (burst 60, %d refilled meanwhile)", total, refill)
	assert.GreaterOrEqual(t, total, 60*3/4, "the fleet's starters admit about the burst")
	// The starters hold at most the burst, but Redis learns of each only
	// when its node reports it: a node that syncs first may lease from a
	// bucket the others' starters have already spent (measured 60-68).
	// Starters of the whole capacity, as a node that trusted no fleet
	// size would take, admit up to 6 x 60.
	assert.LessOrEqual(t, total, 60*5/4+refill, "and not much more than it")
}

// fleetSeen is the least fleet size any of nodes reports for key.
func fleetSeen(t *testing.T, nodes []*hybrid.Limiter, key string) int {
	t.Helper()
	least := len(nodes) + 1
	for _, l := range nodes {
		least = min(least, hybrid.NodesOf(l, key))
	}
	return least
}
