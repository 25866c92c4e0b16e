package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// redisSyncer returns a Redis Syncer on its own client of s, as a separate
// process would have.
func redisSyncer(tb testing.TB, s *redistest.Server) *global.Redis {
	tb.Helper()
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: s.DeadlineClient(tb), Timeout: time.Second})
	require.NoError(tb, err)
	return r
}

// storeProtocol is what hybrid asks of a Redis beyond the Syncer.
type storeProtocol interface {
	store.StrictDecider
	store.ShardDirectory
	store.LeaseShardDirectory
}

// redisStore is redisSyncer as hybrid sees its store protocol
// (store.Of), for the tests that call it directly.
func redisStore(tb testing.TB, s *redistest.Server) storeProtocol {
	tb.Helper()
	return store.Of(redisSyncer(tb, s)).(storeProtocol)
}

// fleet starts n Limiters, each with its own Redis client, sharing s.
func redisFleet(t *testing.T, s *redistest.Server, n int, shares fleet.Shares, p hybrid.Policy) []*hybrid.Limiter {
	t.Helper()
	return fleettest.Limiters(t, n, func(int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{p}, Syncer: redisSyncer(t, s), Shares: shares, Interval: 100 * time.Millisecond}
	})
}

// TestFleetAccuracy offers four nodes sharing one real Redis twice the
// limit for several seconds, uniformly and then with one node taking 80%
// of the traffic (and a sliding window's to one node alone), and compares what they admit with the limit and with an
// ideal single limiter fed the same arrivals.
func TestFleetAccuracy(t *testing.T) {
	t.Parallel()
	const (
		limit  = 1000
		window = time.Second
		run    = 4 * time.Second
	)
	bucket := hybrid.Policy{Name: "api", Limit: limit, Window: window}
	sliding := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: limit, Window: window}
	tests := []struct {
		name   string
		policy hybrid.Policy
		burst  int // what the policy may admit at once beyond its rate
		shares fleet.Shares
		rates  []float64 // offered per node, per second
		// minIdeal is the least part of the ideal limiter's admissions
		// the fleet must reach; 0 only reports it.
		minIdeal float64
	}{
		{"uniform/demandweighted", bucket, limit, fleet.DemandWeighted, []float64{500, 500, 500, 500}, 0.95},
		{"uniform/equal", bucket, limit, fleet.Equal, []float64{500, 500, 500, 500}, 0.95},
		{"skewed/demandweighted", bucket, limit, fleet.DemandWeighted, []float64{1600, 400.0 / 3, 400.0 / 3, 400.0 / 3}, 0.95},
		{"skewed/equal", bucket, limit, fleet.Equal, []float64{1600, 400.0 / 3, 400.0 / 3, 400.0 / 3}, 0},
		// A lease lapses at a window's edge; what the previous window
		// frees until then comes paced (hybrid/slidinglease.go). Under
		// -race on 2 shared cores, against the ideal in the store's
		// windows: one node 99.9-100.0%, four 99.8-100.4% (5 runs);
		// at a load average of 6, 97.7-100.0% and 97.6-98.2%, where
		// before pacing they measured 93.2-96.3% and 92.4-96.9% (and
		// the token buckets' rows fell to 83-90% too). The simulator
		// has 99.95% and 99.74% (sim TestOneNodeIsIdeal,
		// docs/tuning.md).
		{"uniform/slidingwindow", sliding, 0, fleet.DemandWeighted, []float64{500, 500, 500, 500}, 0.96},
		{"one/slidingwindow", sliding, 0, fleet.DemandWeighted, []float64{2000}, 0.96},
	}
	srv := redistest.StartServer(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("acc:%d", i)
			nodes := redisFleet(t, srv, len(tt.rates), tt.shares, tt.policy)
			r := fleettest.Drive(t, nodes, key, tt.rates, run)
			ideal := r.Ideal(t, tt.policy)
			peak := r.MaxInWindow(window)
			got := len(r.Admitted)
			t.Logf("%s: offered %d, admitted %d (per node %v), ideal %d: %.1f%% of ideal; busiest %v window %d (limit %d + burst %d)",
				tt.name, len(r.Offered), got, r.PerNode(), ideal, 100*float64(got)/float64(ideal), window, peak, limit, tt.burst)
			bound, surplus := limit*1.01+float64(tt.burst), 1.01
			if tt.policy.Algorithm == local.SlidingWindow {
				// A sliding window's lease lapses at the edge of the
				// window it is counted in (dated from when its sync was
				// sent, so never after the store's edge), so the aligned
				// windows hold exactly: measured 999-1,000 (dated from
				// the reply's arrival: 1,004 before pacing, 1,012 with
				// it). The
				// two-window estimate assumes the previous window's
				// requests were spread evenly, and leases may bunch
				// them, so the fleet could admit more than the ideal
				// counter over a run: bounded here by 1 +
				// Interval/Window; see docs/architecture.md.
				gap := 1 + float64(100*time.Millisecond)/float64(window)
				aligned := r.MaxAligned(window)
				t.Logf("%s: busiest aligned window %d", tt.name, aligned)
				peak, surplus = aligned, gap*1.01
			}
			assert.LessOrEqual(t, float64(peak), bound, "admitted in one window")
			assert.LessOrEqual(t, float64(got), float64(ideal)*surplus, "admitted overall")
			if tt.minIdeal > 0 {
				assert.GreaterOrEqual(t, float64(got), tt.minIdeal*float64(ideal), "part of the ideal admitted")
			}
		})
	}
}

// TestEarlySync checks that a key whose lease runs low is refilled in the
// background long before the next regular sync: with a 10 s interval, a
// new key has only its starter credit until an early sync leases more.
func TestEarlySync(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	l, err := hybrid.New(hybrid.Config{
		Node:     "early",
		Policies: []hybrid.Policy{{Name: "api", Limit: 100_000, Window: time.Second}},
		Syncer:   redisSyncer(t, srv), Interval: 10 * time.Second,
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	admitted := 0
	deadline := time.Now().Add(2 * time.Second)
	for admitted < 30_000 && time.Now().Before(deadline) {
		d, err := l.Allow("k")
		require.NoError(t, err)
		if d.Allowed() {
			admitted++
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	// The starter credit is 1% of one interval's quota: 10,000.
	assert.GreaterOrEqual(t, admitted, 30_000, "early syncs refilled the lease")
}

// redisPrefix starts the Redis keys of a global.Redis with the default
// RedisConfig.Prefix.
const redisPrefix = "hl:"
