package hybrid_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestStrictKeysOnDeadMaster: one master of a 3-master Cluster is
// killed while four goroutines decide Strict keys, a quarter on the dead
// master's two keys, the rest on the live masters' six. A Strict decision on the dead master's
// key counted a failure on the breaker the node's other calls share:
// three in a row opened it, and every Strict key on the node, those on
// live masters included, followed its FailMode for the breaker's
// cool-down. Now a key whose part of the store is down while the rest
// answers follows its FailMode alone, is not tried again for a while,
// and Health counts it; the breaker stays closed.
func TestStrictKeysOnDeadMaster(t *testing.T) {
	// Not parallel: it loads the machine, and runs apart from the
	// package's timing-bound tests (TestGossipSkew, TestManyKeysAreNotAnOutage).
	c := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	p := hybrid.Policy{Name: "login", Mode: hybrid.Strict, Limit: 1_000_000, Window: time.Second}
	l := fleettest.Limiters(t, 1, func(int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{p}, Syncer: clusterSyncer(t, c), Interval: 100 * time.Millisecond}
	})[0]
	dead := c.Masters[2]
	var live, lost []string
	for i := 0; len(live) < 6 || len(lost) < 2; i++ {
		key := fmt.Sprintf("user-%d", i)
		if c.MasterFor(key) == dead {
			if len(lost) < 2 {
				lost = append(lost, key)
			}
		} else if len(live) < 6 {
			live = append(live, key)
		}
	}
	for _, k := range append(live, lost...) {
		d, err := l.Allow(k)
		require.NoError(t, err)
		require.True(t, d.Allowed())
	}
	dead.Kill()

	var decided, degraded atomic.Int64
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				key := live[(g+i)%len(live)]
				if i%4 == 0 {
					key = lost[(g+i)%len(lost)]
				}
				d, err := l.Allow(key)
				if !assert.NoError(t, err) {
					return
				}
				if key != lost[0] && key != lost[1] {
					decided.Add(1)
					if d.Degraded() {
						degraded.Add(1)
					}
				}
				// Paced: a degraded decision takes nanoseconds, and four
				// goroutines deciding flat out would starve the
				// package's timing-bound tests beside this one.
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	h := l.Health()
	t.Logf("Strict keys on live masters, one master killed: %d of %d decided degraded; health %v, failing keys %d, key error %v",
		degraded.Load(), decided.Load(), h.Level, h.FailingKeys, h.KeyError)
	assert.LessOrEqual(t, degraded.Load(), decided.Load()/100, "the live masters' keys are decided by the store")
	assert.Equal(t, partition.Healthy, fleettest.Link(h))
	assert.Equal(t, 2, h.FailingKeys, "the dead master's keys")
	assert.ErrorIs(t, h.KeyError, fleet.ErrUnreachable)
}
