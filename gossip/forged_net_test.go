package gossip_test

import (
	"io"
	"log"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestForgedPackets sends a live two-node fleet the packets of issue 19,
// over real memberlist on 127.0.0.1: as an outsider on an unkeyed fleet,
// and as a member of a keyed one (it holds the key; it need not even
// join). Each packet names node-2 or a node that does not exist. The
// fleet must survive them all: node-1 does not crash, still counts what
// node-2 spent and hears node-2's next updates, its weights sum to at
// most 1 once node-2 speaks again, and a made-up node's lease lapses
// within seconds rather than weeks.
func TestForgedPackets(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef")
	tests := []struct {
		name   string
		secret []byte
	}{
		{"outsider on an unkeyed fleet", nil},
		{"member of a keyed fleet", key},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := gossiptest.Start(t, 2, func(i int, cfg *gossip.Config) { cfg.SecretKey = tt.secret })
			a, b := c.Nodes[0], c.Nodes[1]
			sync(t, b, "k", window, 900, 1)
			require.Eventually(t, func() bool { return sync(t, a, "k", window, 0, 0).Used >= 900 }, 5*time.Second, 10*time.Millisecond)

			now := time.Now()
			ms := uint64(now.UnixMilli())
			later := uint64(now.Add(time.Hour).UnixNano()) // an incarnation above node-2's
			bucket := fleet.Limit{Algorithm: local.TokenBucket, Limit: 1000, Burst: 1000, Window: time.Second}
			forged := [][]byte{
				// 1: seq 0 made a zero window, and gc divided by it (stamp 0 now).
				gossip.Forge(gossip.KindUpdate, "node-2", later, gossip.Forged{Key: "k", Window: window.Window}),
				// 2: a higher incarnation with a clean slate.
				gossip.Forge(gossip.KindUpdate, "node-2", later, gossip.Forged{Key: "k", Window: window.Window, Stamp: ms}),
				// 3: a far window, the same on another window, and a made-up
				// node's lease of 2^53 for 2^32 ms.
				gossip.Forge(gossip.KindState, "node-2", later, gossip.Forged{Key: "k", Window: window.Window, Stamp: 1 << 53}),
				gossip.Forge(gossip.KindState, "node-2", later, gossip.Forged{Key: "k", Window: 2 * window.Window, Stamp: 1 << 53}),
				gossip.Forge(gossip.KindState, "ghost", 1, gossip.Forged{Key: "lease", Window: time.Second,
					Stamp: ms, Reserved: 1 << 53, TTLms: 1 << 32, Demand: 1}),
				// 5: node-2's farewell.
				gossip.Forge(gossip.KindLeave, "node-2", later),
			}
			sync(t, a, "lease", bucket, 0, 100)
			send(t, tt.secret, a.Addr(), forged...)
			time.Sleep(300 * time.Millisecond) // memberlist hands the packets over

			assert.GreaterOrEqual(t, sync(t, a, "k", window, 0, 0).Used, int64(900), "node-2's counts stand")
			sync(t, b, "k", window, 50, 1)
			require.Eventually(t, func() bool { return sync(t, a, "k", window, 0, 0).Used >= 950 }, 5*time.Second, 10*time.Millisecond,
				"node-2's own updates are heard")
			require.Eventually(t, func() bool {
				ga, gb := sync(t, a, "k", window, 0, 1), sync(t, b, "k", window, 0, 1)
				return ga.Nodes == 2 && ga.Weight+gb.Weight <= 1+1e-9
			}, 5*time.Second, 10*time.Millisecond, "node-2 spoke after its forged farewell: it holds its share again")
			start := time.Now()
			require.Eventually(t, func() bool { return sync(t, a, "lease", bucket, 0, 100).Lease > 0 }, 15*time.Second, 50*time.Millisecond,
				"the made-up node's lease lapses")
			t.Logf("the made-up node's lease lapsed %v after it was sent", time.Since(start).Round(100*time.Millisecond))
			assert.Len(t, a.Members(), 2)

			forgeAhead(t, tt.secret, a, b)
		})
	}
}

// forgeAhead sends a node-2's entry for a key of a short window, under
// node-2's real incarnation (any push/pull shows it), stamped half a
// window ahead, with node-2 holding the whole limit, and a lease for
// 2^32 ms. node-1 must read node-2's own figures again within a window
// (plus the time gossip takes), and go on reading them: before stamps, a
// forged sequence number 2^53 held node-2's entry for the rest of its
// run, its lease stood 10 s, and node-2 dropped out of node-1's view.
func forgeAhead(t *testing.T, secret []byte, a, b *gossip.Gossip) {
	t.Helper()
	lim := fleet.Limit{Algorithm: local.SlidingWindow, Limit: 1000, Window: 2 * time.Second}
	require.Eventually(t, func() bool {
		sync(t, b, "x", lim, 0, 10)
		return sync(t, a, "x", lim, 0, 10).Nodes == 2
	}, 5*time.Second, 10*time.Millisecond)
	start := time.Now()
	stamp := uint64(start.Add(lim.Window / 2).UnixMilli())
	send(t, secret, a.Addr(), gossip.Forge(gossip.KindUpdate, "node-2", b.Incarnation(), gossip.Forged{Key: "x", Window: lim.Window,
		Stamp: stamp, Reserved: uint64(lim.Limit), TTLms: 1 << 32, Demand: 1 << 40, Weight: 65535}))
	require.Eventually(t, func() bool { return sync(t, a, "x", lim, 0, 10).Lease == 0 }, time.Second, 10*time.Millisecond,
		"the forged lease of the whole limit holds while the stamp is ahead of node-2's")
	back := func() bool {
		ga, gb := sync(t, a, "x", lim, 0, 10), sync(t, b, "x", lim, 0, 10)
		return ga.Lease > 0 && ga.Nodes == 2 && ga.Weight+gb.Weight <= 1+1e-9
	}
	require.Eventually(t, back, lim.Window+time.Second, 20*time.Millisecond, "node-2's own figures are back within a window")
	t.Logf("node-2's own figures were back %v after the forgery was sent", time.Since(start).Round(10*time.Millisecond))
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		sync(t, b, "x", lim, 0, 10)
	}
	require.Eventually(t, back, time.Second, 20*time.Millisecond, "and stay: node-2's updates are heard")
}

// send sends each of msgs to addr as a memberlist user message from a
// node of its own, holding secret.
func send(t *testing.T, secret []byte, addr string, msgs ...[]byte) {
	t.Helper()
	mc := memberlist.DefaultLANConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "forger", "127.0.0.1", 0
	mc.SecretKey = secret
	mc.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(mc)
	require.NoError(t, err)
	defer func() { _ = ml.Shutdown() }()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	to := &memberlist.Node{Name: "node-1", Addr: net.ParseIP(host), Port: uint16(p)}
	for _, m := range msgs {
		require.NoError(t, ml.SendReliable(to, m))
	}
}
