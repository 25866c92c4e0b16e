package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestCommandsPerDecision offers 10,000 requests a second over 1,000
// keys to each node (each key decided once an Interval of 100 ms) for ten
// Intervals, and counts what Redis ran, by INFO commandstats: script
// calls and commands (those inside scripts included) per decision. One
// script call per key and sync made it 1.0 script call and 8.0 commands
// a decision; a script call carries up to 48 keys now: 0.021 and 6.06,
// 4.06 once a key's own fields came from its HGETALL and its report's
// series went in its one HSET, and 3.06 with its expiry renewed only
// when less than its TTL is left. The keys are far from their limit
// (1,000,000 a second), so they now rest (rest.go): their leases stand
// for the node's IdleTimeout, and a round syncs only the resting key
// synced longest ago: 0.0011 script calls and 0.007 commands a
// decision on one node (issue 21's target: 0.05). On four nodes sharing
// the keys no key rested, since each node's slack lease left the bucket
// under three quarters of its burst: 3.2 commands a decision, until a
// resting lease was cut to its part of a quarter of the burst. Counts,
// not times: the rounds are driven here (ManualSync), so a loaded
// machine changes nothing but how long the test takes.
//
// A sliding window (of an hour here) rests too, until its window's edge
// (leaseSlidingWindow): before, its keys synced every Interval, 4.1
// commands a decision on one node and 3.9 on four; now 0.009.
func TestCommandsPerDecision(t *testing.T) {
	t.Parallel()
	policies := []hybrid.Policy{
		{Name: "p", Limit: 1_000_000, Window: time.Second},
		{Name: "p", Algorithm: local.SlidingWindow, Limit: 1 << 30, Window: time.Hour},
	}
	for _, p := range policies {
		for _, nodes := range []int{1, 4} {
			t.Run(fmt.Sprintf("%v/nodes=%d", p.Algorithm, nodes), func(t *testing.T) {
				t.Parallel()
				commandsPerDecision(t, nodes, p)
			})
		}
	}
}

func commandsPerDecision(t *testing.T, nodes int, p hybrid.Policy) {
	const keys, rounds, interval = 1000, 10, 100 * time.Millisecond
	srv := redistest.StartServer(t)
	fleet := make([]*hybrid.Limiter, nodes)
	for n := range fleet {
		l, err := hybrid.New(hybrid.Config{
			Node:     fmt.Sprint("n", n),
			Policies: []hybrid.Policy{p},
			Syncer:   redisSyncer(t, srv),
			Interval: interval,
			// Calls of at least 256 keys (see round.go), however loaded the
			// machine: a call that takes over half of SyncTimeout halves them.
			SyncTimeout: 2 * time.Second,
			ManualSync:  true,
			MaxKeys:     2 * keys,
			HotKeyRate:  -1,
		})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		fleet[n] = l
	}
	ctx := context.Background()
	round := func() {
		for _, l := range fleet {
			for i := range keys {
				d, err := l.Allow(fmt.Sprint("tenant:", i))
				require.NoError(t, err)
				require.True(t, d.Allowed())
			}
		}
		for _, l := range fleet {
			require.NoError(t, l.SyncOnce(ctx))
		}
	}
	// Every key known to Redis, past the syncs before a key may rest
	// (restSyncs): three rounds on an idle machine; on a loaded one a
	// round's calls may leave keys for the next (a CI run under -race
	// counted 814 key syncs in the ten rounds after three), so rounds go
	// on until one syncs no more than the resting keys' turns.
	settled := false
	for range 30 {
		srv.ResetStats(t)
		round()
		if srv.Commands(t)["hset"] <= int64(2*nodes) { // a key sync writes its state in one HSET
			settled = true
			break
		}
	}
	require.True(t, settled, "keys still syncing every round after 30 rounds")
	srv.ResetStats(t)
	start := time.Now()
	for r := range rounds {
		round()
		time.Sleep(time.Until(start.Add(time.Duration(r+1) * interval)))
	}
	cmds := srv.Commands(t)
	total := int64(0)
	for _, n := range cmds {
		total += n
	}
	decisions := float64(nodes * keys * rounds)
	scripts := float64(cmds["evalsha"]+cmds["eval"]) / decisions
	t.Logf("%d nodes, per decision: %.4f script calls, %.3f commands (%v)", nodes, scripts, float64(total)/decisions, cmds)
	assert.LessOrEqual(t, scripts, 0.05, "script calls per decision")
	assert.LessOrEqual(t, float64(total)/decisions, 0.05, "commands per decision (inside scripts too)")
}

// TestCommandsPerStrictDecision counts what Redis runs for a Strict
// decision (GCRA, the default), by INFO commandstats: one script call,
// and inside it TIME, the key's state and shard mark in one MGET, and
// the SET of the new state. The state and the mark were two GETs: 5
// commands a decision to go-redis/redis_rate's 4 (docs/benchmarks.md).
func TestCommandsPerStrictDecision(t *testing.T) {
	t.Parallel()
	const keys = 100
	srv := redistest.StartServer(t)
	l, err := hybrid.New(hybrid.Config{
		Node:       "n1",
		Policies:   []hybrid.Policy{{Name: "exact", Mode: hybrid.Strict, Limit: 1_000_000, Window: time.Second}},
		Syncer:     redisSyncer(t, srv),
		ManualSync: true,
		HotKeyRate: -1,
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for i := range keys { // every key's state exists from here on
		_, err := l.Allow(fmt.Sprint("tenant:", i))
		require.NoError(t, err)
	}
	srv.ResetStats(t)
	for range 10 {
		for i := range keys {
			d, err := l.Allow(fmt.Sprint("tenant:", i))
			require.NoError(t, err)
			require.True(t, d.Allowed())
		}
	}
	cmds := srv.Commands(t)
	total := int64(0)
	for _, n := range cmds {
		total += n
	}
	t.Logf("per decision: %.3f commands (%v)", float64(total)/(10*keys), cmds)
	assert.Equal(t, int64(10*keys), cmds["evalsha"], "one script call a decision")
	assert.LessOrEqual(t, float64(total)/(10*keys), 4.0, "commands per decision (inside the script too)")
}
