package global

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestRepliesChecked feeds the reply readers what a script of another
// version, or a store that lies, could answer: each must fail the key
// with ErrCorrupt, never hand the caller a lease or a decision. (The
// scripts' own checks, against a real Redis, are TestCorrupt*.)
func TestRepliesChecked(t *testing.T) {
	t.Parallel()
	r := &Redis{addr: "redis.test:6379"}
	u := fleet.Usage{Key: "k", Limit: fleet.Limit{Limit: 100, Window: time.Second}, Demand: 50}
	ok := []int64{10, 2000, 40, 60, 1, 1e6, 500, 1, 0, 0, 0, 0}
	g, err := r.grantOf(u, time.Millisecond, ok)
	require.NoError(t, err)
	assert.Equal(t, fleet.Grant{Lease: 10, TTL: 2 * time.Millisecond, Used: 40, Remaining: 60, Nodes: 1, Weight: 1, ResetAfter: 500 * time.Microsecond}, g)

	grants := []struct {
		name string
		i    int
		v    int64
	}{
		{"negative lease", 0, -1},
		{"lease above the burst", 0, 101},
		{"negative ttl", 1, -1},
		// Two intervals, or the rest the node asked for (none here):
		// a TTL past it rests a key the scripts never let rest, and one
		// of centuries wrapped the lease's expiry into the past.
		{"ttl past two intervals", 1, 2001},
		{"ttl of centuries", 1, math.MaxInt64},
		{"negative used", 2, -5},
		{"remaining above the burst", 3, 101},
		{"no nodes", 4, 0},
		{"weight above one", 5, 1e6 + 1},
		{"negative reset", 6, math.MinInt64},
		{"zero shards", 8, -1},
		{"one shard", 8, 1},
		{"too many shards", 8, fleet.MaxShards + 1},
		{"paced unasked", 10, 5},
		{"a pace lasting without one", 11, 1000},
	}
	for _, tt := range grants {
		v := append([]int64(nil), ok...)
		v[tt.i] = tt.v
		_, err := r.grantOf(u, time.Millisecond, v)
		assert.ErrorIs(t, err, fleet.ErrCorrupt, tt.name)
	}
	// A node that asked to rest (Hold) may be granted a TTL that long,
	// within MaxRest; a lease shard never rests.
	ru := u
	ru.Hold = time.Second
	for _, tt := range []struct {
		u    fleet.Usage
		ttl  int64
		sane bool
	}{
		{ru, 1_000_000, true}, {ru, 1_000_001, false},
		{fleet.Usage{Key: "k", Limit: u.Limit, Demand: 50, Hold: time.Hour}, store.MaxRest(1000), true},
		{fleet.Usage{Key: "k", Limit: u.Limit, Demand: 50, Hold: time.Hour}, store.MaxRest(1000) + 1, false},
		{fleet.Usage{Key: "k", Limit: u.Limit, Demand: 50, Hold: time.Second, Shard: fleet.ShardsOf("k", 2)[0]}, 2001, false},
	} {
		v := append([]int64(nil), ok...)
		v[1] = tt.ttl
		_, err := r.grantOf(tt.u, time.Millisecond, v)
		if tt.sane {
			assert.NoError(t, err, "a TTL of %d µs, Hold %v", tt.ttl, tt.u.Hold)
		} else {
			assert.ErrorIs(t, err, fleet.ErrCorrupt, "a TTL of %d µs, Hold %v, shard %v", tt.ttl, tt.u.Hold, tt.u.Shard)
		}
	}

	marked := append([]int64(nil), ok...)
	marked[8], marked[9] = 4, -1
	_, err = r.grantOf(u, time.Millisecond, marked)
	assert.ErrorIs(t, err, fleet.ErrCorrupt, "a mark lasting less than nothing")

	// A paced sliding window lease: the lease and its paced part within
	// the limit, paced over at most a window, and over some time.
	pu := u
	pu.Paced, pu.Limit.Algorithm = true, local.SlidingWindow
	paced := append([]int64(nil), ok...)
	paced[10], paced[11] = 90, 200_000
	g, err = r.grantOf(pu, time.Millisecond, paced)
	require.NoError(t, err)
	assert.Equal(t, int64(90), g.Paced)
	assert.Equal(t, 200*time.Millisecond, g.PacedFor)
	for _, bad := range [][2]int64{{91, 200_000}, {-1, 0}, {5, 0}, {5, -1}, {5, 1_000_001}} {
		v := append([]int64(nil), paced...)
		v[10], v[11] = bad[0], bad[1]
		_, err := r.grantOf(pu, time.Millisecond, v)
		assert.ErrorIs(t, err, fleet.ErrCorrupt, "paced %d over %d µs", bad[0], bad[1])
	}

	lim := fleet.Limit{Limit: 100, Window: time.Second}
	d, err := r.decisionOf("k", lim, []int64{1, 99, 0, 10})
	require.NoError(t, err)
	assert.Equal(t, store.Decision{Allowed: true, Remaining: 99, ResetAfter: 10 * time.Microsecond}, d)
	for _, v := range [][]int64{
		{3, 0, 0, 0},     // no such outcome
		{-1, 0, 0, 0},    // nor this
		{2, 0, 0, 1000},  // marked into no shards
		{2, 1, 0, 1000},  // or one
		{2, 4, 0, -1000}, // for less than nothing
		{1, 101, 0, 10},  // more left than the burst
		{0, -1, 5, 10},   // less than nothing left
		{0, 0, -2, 10},   // a retry before now
		{1, 50, 7, 10},   // admitted, yet to retry
		{0, 0, 5, -10},   // a reset before now
	} {
		_, err := r.decisionOf("k", lim, v)
		assert.ErrorIs(t, err, fleet.ErrCorrupt, "%v", v)
	}

	for _, v := range [][]int64{{0, 0}, {4, 0}, {4, 1000}} {
		_, _, err := r.markOf("k", v)
		assert.NoError(t, err, "%v", v)
	}
	for _, v := range [][]int64{{0, 1000}, {1, 1000}, {-4, 1000}, {4, -1}, {fleet.MaxShards + 1, 0}} {
		_, _, err := r.markOf("k", v)
		assert.ErrorIs(t, err, fleet.ErrCorrupt, "%v", v)
	}

	call := scriptCall{keys: []string{"hl:{k}:lease"}, reply: 2}
	for _, v := range []any{"OK", []any{int64(1)}, []any{int64(1), "x"}, []any{int64(1), 2.5}} {
		_, err := r.int64s(call, v)
		assert.ErrorIs(t, err, fleet.ErrCorrupt, "%v", v)
	}
	assert.Equal(t, time.Duration(math.MaxInt64), durationOf(math.MaxInt64/1000+1), "saturates")
}

// FuzzReplies feeds the reply readers arbitrary numbers, as a store that
// lies could answer, and checks the invariants every caller relies on: no
// panic; an error wraps ErrCorrupt; anything accepted is within what a
// live fleet could hold (a lease within the burst and the demand, a
// weight in [0, 1], no negative count or duration, a shard count a node
// could have set, a decision that admits with nothing to wait).
func FuzzReplies(f *testing.F) {
	f.Add(int64(100), int64(50), []byte{10, 0, 0, 0, 0, 0, 0, 0, 208, 7, 0, 0, 0, 0, 0, 0})
	f.Add(int64(1), int64(0), []byte{255, 255, 255, 255, 255, 255, 255, 255, 1})
	f.Fuzz(func(t *testing.T, limit, demand int64, raw []byte) {
		lim := fleet.Limit{Limit: max(1, min(limit, fleet.MaxLimit)), Window: time.Second}
		if lim.Validate() != nil {
			return
		}
		u := fleet.Usage{Key: "k", Limit: lim, Demand: max(0, demand)}
		if limit%2 != 0 { // a paced sliding window
			u.Limit.Algorithm, u.Paced = local.SlidingWindow, true
		}
		v := make([]int64, 12)
		for i := range v {
			var b [8]byte
			copy(b[:], raw[min(len(raw), 8*i):])
			v[i] = int64(binary.LittleEndian.Uint64(b[:]))
		}
		r := &Redis{addr: "redis.test:6379"}
		g, err := r.grantOf(u, time.Millisecond, v)
		switch {
		case err != nil:
			require.ErrorIs(t, err, fleet.ErrCorrupt)
		case g.Shards != 0:
			require.True(t, g.Shards >= 2 && g.Shards <= fleet.MaxShards, "shards %d", g.Shards)
			require.GreaterOrEqual(t, g.ShardedFor, time.Duration(0))
		default:
			require.True(t, g.Lease >= 0 && g.Lease <= lim.Capacity() && g.Lease <= u.Demand, "lease %d", g.Lease)
			require.True(t, g.Used >= 0 && g.Remaining >= 0 && g.Remaining <= lim.Capacity())
			require.True(t, g.Nodes >= 1 && g.Weight >= 0 && g.Weight <= 1)
			require.True(t, g.TTL >= 0 && g.ResetAfter >= 0)
			require.True(t, g.Paced >= 0 && g.Lease+g.Paced <= lim.Capacity(), "paced %d", g.Paced)
			require.True(t, g.PacedFor >= 0 && g.PacedFor <= lim.Window && (g.Paced == 0 || g.PacedFor > 0), "paced for %v", g.PacedFor)
		}
		d, err := r.decisionOf("k", lim, v[:4])
		switch {
		case err != nil:
			require.ErrorIs(t, err, fleet.ErrCorrupt)
		case d.Shards != 0:
			require.True(t, d.Shards >= 2 && d.Shards <= fleet.MaxShards)
		default:
			require.True(t, d.Remaining >= 0 && d.Remaining <= lim.Capacity())
			require.True(t, d.RetryAfter >= -1 && d.ResetAfter >= 0)
			require.False(t, d.Allowed && d.RetryAfter != 0)
		}
		n, left, err := r.markOf("k", v[:2])
		if err != nil {
			require.ErrorIs(t, err, fleet.ErrCorrupt)
		} else {
			require.True(t, n == 0 || (n >= 2 && n <= fleet.MaxShards))
			require.GreaterOrEqual(t, left, time.Duration(0))
		}
	})
}

// reply is an error as Redis answers it.
type reply string

func (e reply) Error() string { return string(e) }
func (reply) RedisError()     {}

// TestClassify checks which of Redis's replies mean the fleet cannot be
// used (an outage, for every key) and which are one key's: a reply's
// prefix decides, never a word in its text, which may quote a stored
// value.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err         error
		unreachable bool
	}{
		{reply("OOM command not allowed when used memory > 'maxmemory'."), true},
		{reply("NOREPLICAS Not enough good replicas to write."), true},
		{reply("MISCONF Redis is configured to save RDB snapshots"), true},
		{reply("READONLY You can't write against a read only replica."), true},
		{reply("MASTERDOWN Link with MASTER is down"), true},
		{reply("LOADING Redis is loading the dataset in memory"), true},
		{reply("BUSY Redis is busy running a script."), true},
		{reply("CLUSTERDOWN The cluster is down"), true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("MOVED 3999 127.0.0.1:6381"), true},
		{reply("ASK 3999 127.0.0.1:6381"), true},
		{reply("NOAUTH Authentication required."), true},
		{reply("WRONGPASS invalid username-password pair"), true},
		{reply("NOPERM this user has no permissions"), true},
		{reply("ERR max number of clients reached"), true},
		{reply(`ERR CORRUPT tokens holds "connection" script: 1234`), false},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{reply("ERR Error running script: connection"), false},
		{errors.New("EOF"), true},
		{errors.New("redis: connection pool timeout"), true},
		{errors.New("dial tcp 127.0.0.1:1: Connection refused"), true},
	} {
		assert.Equal(t, tc.unreachable, isUnreachable(tc.err), "%v", tc.err)
	}
}
