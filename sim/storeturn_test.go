package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestStoreMatchesRedisTurn holds the simulator's store and Redis's
// scripts to the turn (turnOf): at an interval longer than an eighth of
// the window, a lease granted while less than a quarter of the capacity
// is left takes at most its weight's part of twice what the limit
// refills over the node's turn, an interval or, from an interval as
// long as the window, an eighth of the window. One node leases 780 of
// 1,000; two more that demand 100 each come to a bucket of about 220.
// Before the turn each was leased its 100, its weight's part of the
// capacity allowing 114: the first to sync after a quiet spell took
// what the others needed for their turns. At 100 ms nothing changes.
func TestStoreMatchesRedisTurn(t *testing.T) {
	t.Parallel()
	r, client := realStore(t)
	for _, c := range []struct {
		interval time.Duration
		want     [2]int64 // the two late nodes' leases: ceil(2*turn*weight), weights 100/880 and 100/980
	}{
		{2 * time.Second, [2]int64{29, 26}},          // turn 125: an eighth of the window
		{200 * time.Millisecond, [2]int64{46, 41}},   // turn 200: the interval
		{100 * time.Millisecond, [2]int64{100, 100}}, // no turn: slack and lag instead
	} {
		for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow} {
			key := fmt.Sprintf("turn-%v-%v", c.interval, alg)
			lim := fleet.Limit{Algorithm: alg, Limit: 1000, Window: time.Second}
			st := &store{keys: map[string]*lease{}}
			for i, demand := range []int64{780, 100, 100} {
				req := fleet.Request{Node: fmt.Sprint("n", i), Interval: c.interval,
					Keys: []fleet.Usage{{Key: key, Limit: lim, Demand: demand}}}
				w, g, _ := syncBoth(t, r, client, st, req)
				what := fmt.Sprintf("%v, %v, node %d", c.interval, alg, i)
				assert.Equal(t, w.Lease, g.Lease, "lease: %s", what)
				assert.Equal(t, w.Nodes, g.Nodes, "nodes: %s", what)
				if i > 0 {
					assert.Equal(t, c.want[i-1], w.Lease, "Redis's lease: %s", what)
				} else {
					assert.Equal(t, demand, w.Lease, "a full bucket: %s", what)
				}
			}
		}
	}
}
