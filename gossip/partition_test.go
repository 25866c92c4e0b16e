package gossip_test

import (
	"fmt"
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
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// TestPartitionKeepsShares splits a loaded fleet {1,2,3} | {4,5} through
// the fault-injecting transport. Each side goes on limiting with the
// shares it held, keeping the other side's reserved: neither admits more
// than its part of the limit, so together they stay within it.
func TestPartitionKeepsShares(t *testing.T) {
	t.Parallel()
	const (
		limit = 1000
		cut   = 2 * time.Second
		heal  = 6 * time.Second
		run   = 7 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	c := gossiptest.Start(t, 5, nil)
	nodes := limiters(t, c, 100*time.Millisecond, fleet.DemandWeighted, policy)
	go func() {
		time.Sleep(cut)
		c.Partition([]int{0, 1, 2}, []int{3, 4})
		time.Sleep(heal - cut)
		c.Heal()
	}()
	r := fleettest.Drive(t, nodes, "k", []float64{400, 400, 400, 400, 400}, run)
	// From a second after the cut (the last leases granted before it are
	// spent) to the heal.
	from, to := cut+time.Second, heal
	secs := (to - from).Seconds()
	a := float64(r.AdmittedBetween(from, to, 0, 1, 2)) / secs
	b := float64(r.AdmittedBetween(from, to, 3, 4)) / secs
	t.Logf("during the partition: {1,2,3} admitted %.0f/s (share 600), {4,5} %.0f/s (share 400), together %.0f/s (limit %d); whole run %d of ideal %d",
		a, b, a+b, limit, len(r.Admitted), r.Ideal(t, policy))
	assert.LessOrEqual(t, a, 600*1.1, "{1,2,3} within its reserved share")
	assert.LessOrEqual(t, b, 400*1.1, "{4,5} within its reserved share")
	assert.GreaterOrEqual(t, a+b, limit*0.8, "the sides keep serving their shares")
	// Unsplit, the fleet would admit the same: these shares mean something
	// only if the cut was in force both ways.
	assert.Positive(t, c.Transports[0].Dropped(), "{1,2,3} lost traffic to the cut")
	assert.Positive(t, c.Transports[3].Dropped(), "{4,5} lost traffic to the cut")
}

// TestPartitionLadder splits a loaded fleet {1,2,3} | {4,5} and holds the
// split past the grace period, when each side releases the other's
// shares. The majority then serves the whole limit, as it should if the
// others had died; the minority, told by its Gossip that it hears only
// two of five, climbs down its Limiters' ladder, so the fleet admits at
// most limit x (1 + factor): the bound docs/partitions.md states.
func TestPartitionLadder(t *testing.T) {
	t.Parallel()
	const (
		limit = 1000
		cut   = 2 * time.Second
	)
	policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second}
	ladder := partition.LadderConfig{Steps: []partition.Step{{Until: time.Second, Factor: 1}, {Until: 2 * time.Second, Factor: 0.5}, {Factor: 0.25}}}
	c := gossiptest.Start(t, 5, func(_ int, cfg *gossip.Config) {
		cfg.Grace = 2 * time.Second
		// A side of two gathers few confirmations of a suspicion, and
		// memberlist then waits up to 6x its suspicion timeout: about
		// 24 s. Capped at 1x (3 s), keeping the harness's patient 2 s
		// probes so that a loaded machine does not kill live nodes.
		cfg.Tune = func(m *memberlist.Config) {
			gossiptest.Patient(m)
			m.SuspicionMult, m.SuspicionMaxTimeoutMult = 3, 1
		}
	})
	nodes := fleettest.Limiters(t, len(c.Nodes), func(i int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{policy}, Syncer: c.Nodes[i], Ladder: ladder}
	})

	// The minority tips when memberlist declares the third of the
	// others dead; watch for it, then measure once the ladder is at 0.25.
	start := time.Now()
	tipped := make(chan time.Duration, 1)
	stop := make(chan struct{})
	go func() {
		time.Sleep(cut)
		c.Partition([]int{0, 1, 2}, []int{3, 4})
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			// The tip counts once nodes 4 and 5 each see only their
			// side: a starved machine can make a node degraded for a
			// moment before memberlist has dropped the majority, and
			// the two need not drop it at once (node 5 was still
			// Healthy 4.3 s after node 4 tipped in one run in eight
			// under -race).
			tip := time.Duration(0)
			for _, i := range []int{3, 4} {
				h := nodes[i].Health()
				if h.Level == partition.Healthy || time.Since(start)-h.Since < cut || len(c.Nodes[i].Members()) > 2 {
					tip = 0
					break
				}
				tip = max(tip, time.Since(start)-h.Since)
			}
			if tip > 0 {
				tipped <- tip
				return
			}
		}
	}()
	const measure = 2 * time.Second
	var tip time.Duration
	r := fleettest.DriveUntil(t, nodes, "k", []float64{400, 400, 400, 400, 400}, func(now time.Duration) bool {
		select {
		case tip = <-tipped:
		default:
		}
		return tip > 0 && now >= tip+2300*time.Millisecond+measure || now > 30*time.Second
	})
	close(stop)
	require.Positive(t, tip, "the minority learned it was cut off, after the cut")
	for i := range 3 {
		assert.Equal(t, partition.Healthy, fleettest.Link(nodes[i].Health()), "the majority is in touch")
	}
	h := nodes[4].Health()
	assert.Equal(t, partition.Emergency, h.Level)
	assert.Equal(t, 0.25, h.Factor)

	from, to := tip+2300*time.Millisecond, tip+2300*time.Millisecond+measure
	secs := measure.Seconds()
	a := float64(r.AdmittedBetween(from, to, 0, 1, 2)) / secs
	b := float64(r.AdmittedBetween(from, to, 3, 4)) / secs
	t.Logf("split at %v, minority tipped %v later; at factor 0.25 past the grace: {1,2,3} %.0f/s (limit %d), {4,5} %.0f/s (0.25 x limit), together %.0f/s (bound %d)",
		cut, tip-cut, a, limit, b, a+b, limit*5/4)
	assert.LessOrEqual(t, a, limit*1.1, "the majority within the limit")
	assert.LessOrEqual(t, b, limit*0.25*1.15, "the minority within its ladder's budget")
	assert.GreaterOrEqual(t, b, limit*0.25*0.6, "and still serving")
	assert.LessOrEqual(t, a+b, limit*1.25*1.1, "the fleet within limit x (1 + factor)")
}

// TestPartitionHeals counts on both sides of a partition and checks that
// after the heal every node sees both sides' counts. Memberlist is told
// to stop gossiping to dead nodes after 300 ms, leaving most of the
// healing to the nodes' periodic re-joins (TestRejoin proves those alone
// suffice).
func TestPartitionHeals(t *testing.T) {
	t.Parallel()
	c := gossiptest.Start(t, 5, func(i int, cfg *gossip.Config) {
		cfg.RejoinInterval = 500 * time.Millisecond
		cfg.Tune = func(c *memberlist.Config) {
			fastFailureDetection(c)
			c.GossipToTheDeadTime, c.PushPullInterval = 300*time.Millisecond, time.Hour
		}
	})
	for _, g := range c.Nodes {
		sync(t, g, "k", window, 0, 1)
	}
	c.Partition([]int{0, 1, 2}, []int{3, 4})
	sync(t, c.Nodes[0], "k", window, 100, 1)
	sync(t, c.Nodes[3], "k", window, 50, 1)
	require.Eventually(t, func() bool {
		return sync(t, c.Nodes[2], "k", window, 0, 1).Used == 100 && sync(t, c.Nodes[4], "k", window, 0, 1).Used == 50
	}, 3*time.Second, 10*time.Millisecond, "each side sees its own counts")
	// Until memberlist has declared the other side dead.
	c.WaitMembers(t, 3, 20*time.Second, 0, 1, 2)
	c.WaitMembers(t, 2, 20*time.Second, 3, 4)
	time.Sleep(time.Second) // past GossipToTheDeadTime: memberlist has given up
	joins := func() (n uint64) {
		for _, g := range c.Nodes {
			n += g.Stats().Joins
		}
		return n
	}
	before := joins()
	start := time.Now()
	c.Heal()
	c.WaitMembers(t, 5, 20*time.Second)
	for i, g := range c.Nodes {
		require.Eventually(t, func() bool { return sync(t, g, "k", window, 0, 1).Used == 150 }, 5*time.Second, 10*time.Millisecond,
			"node %d converges on both sides' counts", i+1)
	}
	t.Logf("after the heal, all 5 nodes agreed on the counts in %v", time.Since(start))
	t.Logf("re-joins that succeeded meanwhile: %d", joins()-before)
}

// TestRejoin starts a node whose seed is cut off, so memberlist never
// learns of the fleet at all, then heals the network: only the node's
// periodic re-join of its seeds can bring it in.
func TestRejoin(t *testing.T) {
	t.Parallel()
	c := gossiptest.Start(t, 1, nil)
	c.Net.Partition([]string{c.Addr(0)})
	late, err := gossip.New(gossip.Config{
		Name: "late", BindAddr: "127.0.0.1", Seeds: []string{c.Addr(0)},
		RejoinInterval: 200 * time.Millisecond, TCPTimeout: 200 * time.Millisecond, Tune: gossiptest.Patient,
		WrapTransport: func(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport { return c.Net.Wrap(t) },
	})
	require.NoError(t, err)
	defer func() { require.NoError(t, late.Close()) }()
	assert.Len(t, late.Members(), 1)
	_, err = late.Sync(t.Context(), &fleet.Request{Interval: time.Second})
	assert.ErrorIs(t, err, fleet.ErrUnreachable, "its seeds never answered")

	c.Heal()
	require.Eventually(t, func() bool { return len(late.Members()) == 2 && len(c.Nodes[0].Members()) == 2 },
		5*time.Second, 10*time.Millisecond, "the re-join brought it in")
	assert.NotZero(t, late.Stats().Joins)
	assert.NotZero(t, late.Stats().JoinFailures, "it tried while the seed was cut off")
	_, err = late.Sync(t.Context(), &fleet.Request{Interval: time.Second})
	assert.NoError(t, err)
}

// TestGracefulLeave checks that a node that leaves hands its share to the
// others at once: long before the 3 s in which a silent peer's entries go
// stale, let alone the grace period. The time it took is reported; on an
// idle machine it is well under one 100 ms interval.
func TestGracefulLeave(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	c := gossiptest.Start(t, 5, nil)
	equal := func(g *gossip.Gossip) fleet.Grant {
		resp, err := g.Sync(t.Context(), &fleet.Request{Interval: interval, Shares: fleet.Equal,
			Keys: []fleet.Usage{{Key: "k", Limit: window, Demand: 10}}})
		require.NoError(t, err)
		return resp.Grants[0]
	}
	for _, g := range c.Nodes {
		equal(g)
	}
	for _, g := range c.Nodes[:4] {
		require.Eventually(t, func() bool { return equal(g).Nodes == 5 }, 2*time.Second, 5*time.Millisecond)
	}
	require.NoError(t, c.Nodes[4].Close())
	closed := time.Now()
	for i, g := range c.Nodes[:4] {
		require.Eventually(t, func() bool { g := equal(g); return g.Nodes == 4 && g.Weight == 0.25 }, time.Second, time.Millisecond,
			"node %d took the leaver's share", i+1)
		t.Logf("node %d: share redistributed %v after the leaver's Close returned (interval %v)", i+1, time.Since(closed), interval)
	}
}

// TestStrangersRefused starts a fleet with a key and a label, and nodes
// with the wrong key or the wrong label: they cannot join, and what they
// count never reaches the fleet.
func TestStrangersRefused(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef")
	c := gossiptest.Start(t, 3, func(i int, cfg *gossip.Config) { cfg.SecretKey, cfg.Label = key, "prod" })
	tests := []struct {
		name    string
		key     []byte
		label   string
		refused bool
	}{
		{"wrong key", []byte("fedcba9876543210"), "prod", true},
		{"no key", nil, "prod", true},
		{"wrong label", key, "staging", true},
		{"no label", key, "", true},
		{"right key and label", key, "prod", false}, // the control: the same bytes get through
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := fmt.Sprintf("k%d", i)
			name := fmt.Sprintf("stranger-%d", i)
			if tt.refused {
				s, err := gossip.New(gossip.Config{Name: name, BindAddr: "127.0.0.1", SecretKey: tt.key, Label: tt.label, TCPTimeout: 500 * time.Millisecond})
				require.NoError(t, err)
				_, err = s.Join(c.Nodes[0].Addr())
				assert.Error(t, err, "the join is refused")
				assert.Len(t, s.Members(), 1)
				require.NoError(t, s.Close())
			}
			// Whatever the join, the stranger sends real counts straight at
			// a member, with its credentials.
			sendRaw(t, name, tt.key, tt.label, c.Nodes[0].Addr(), k)
			// The refused cases wait as long as the control may take, so
			// that a count not seen is a count refused, not a late one.
			const wait = time.Second
			if tt.refused {
				time.Sleep(wait)
				assert.Zero(t, sync(t, c.Nodes[0], k, window, 0, 1).Used, "no count from the stranger")
			} else {
				require.Eventually(t, func() bool { return sync(t, c.Nodes[0], k, window, 0, 1).Used >= 500 }, wait, 20*time.Millisecond)
			}
			assert.Len(t, c.Nodes[0].Members(), 3)
		})
	}
}

// sendRaw sends addr one update from node name, consuming 500 of key, as
// a memberlist user message with the given credentials.
func sendRaw(t *testing.T, name string, secret []byte, label, addr, key string) {
	t.Helper()
	core, err := gossipsim.NewCore(name, 1, gossip.Config{})
	require.NoError(t, err)
	_, err = core.Sync(&fleet.Request{Interval: 100 * time.Millisecond,
		Keys: []fleet.Usage{{Key: key, Limit: window, Consumed: 500, Demand: 1}}}, time.Now())
	require.NoError(t, err)
	ups := core.Updates(time.Now())
	require.Len(t, ups, 1)

	mc := memberlist.DefaultLANConfig()
	mc.Name, mc.BindAddr, mc.BindPort = name, "127.0.0.1", 0
	mc.SecretKey, mc.Label = secret, label
	mc.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(mc)
	require.NoError(t, err)
	defer func() { _ = ml.Shutdown() }()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	require.NoError(t, ml.SendBestEffort(&memberlist.Node{Name: "node-1", Addr: net.ParseIP(host), Port: uint16(p)}, ups[0].Msg))
}

// fastFailureDetection has memberlist declare an unreachable node dead in
// about a second rather than about ten.
func fastFailureDetection(c *memberlist.Config) {
	c.ProbeInterval, c.ProbeTimeout, c.SuspicionMult = 200*time.Millisecond, 100*time.Millisecond, 2
}
