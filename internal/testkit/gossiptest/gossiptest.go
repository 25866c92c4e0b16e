// Package gossiptest starts fleets of real gossip nodes on 127.0.0.1 for
// tests: free ports, one fault-injecting network between them, and
// cleanup when the test ends.
package gossiptest

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
)

// Cluster is a fleet of gossip nodes in this process.
type Cluster struct {
	Nodes      []*gossip.Gossip
	Transports []*faultnet.Transport
	Net        *faultnet.Network
}

// Start starts n nodes named node-1 … node-n on free loopback ports,
// each seeded with node-1's address, and waits until every node sees all
// n. tune, if not nil, adjusts node i's Config (0-based) before it
// starts. The nodes are closed when the test ends.
func Start(tb testing.TB, n int, tune func(i int, c *gossip.Config)) *Cluster {
	tb.Helper()
	c := &Cluster{Net: faultnet.New(), Transports: make([]*faultnet.Transport, n)}
	for i := range n {
		cfg := gossip.Config{
			Name:     fmt.Sprintf("node-%d", i+1),
			BindAddr: "127.0.0.1",
			WrapTransport: func(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
				w := c.Net.Wrap(t)
				c.Transports[i] = w
				return w
			},
			Tune: Patient,
		}
		if i > 0 {
			cfg.Seeds = []string{c.Nodes[0].Addr()}
		}
		if tune != nil {
			tune(i, &cfg)
		}
		g, err := gossip.New(cfg)
		require.NoError(tb, err, "starting node %d", i+1)
		c.Nodes = append(c.Nodes, g)
	}
	tb.Cleanup(c.Close)
	// Nodes seeded with node-1 learn of the ones that start after them
	// from memberlist's gossip of their joins, a few transmissions to
	// random members each, or else from a push-pull every 30 s: on a
	// machine starved of CPU one node of six still saw three after 10 s.
	// A node still short after a second or two joins every other node
	// directly (a push-pull with each), as an operator would.
	for try := 0; try < 4 && !c.seeAll(n); try++ {
		time.Sleep(time.Duration(try+1) * 500 * time.Millisecond)
		for i, g := range c.Nodes {
			if len(g.Members()) < n {
				_, _ = g.Join(c.addrsBut(i)...)
			}
		}
	}
	c.WaitMembers(tb, n, 10*time.Second)
	return c
}

// seeAll reports whether every node sees n members.
func (c *Cluster) seeAll(n int) bool {
	for _, g := range c.Nodes {
		if len(g.Members()) != n {
			return false
		}
	}
	return true
}

// addrsBut returns every node's gossip address but node i's.
func (c *Cluster) addrsBut(i int) []string {
	var out []string
	for j, g := range c.Nodes {
		if j != i {
			out = append(out, g.Addr())
		}
	}
	return out
}

// Patient is the harness's memberlist tuning: memberlist's own LAN
// failure detection (probes every 1 s, suspicion stretched up to 6
// times) rather than gossip.New's quicker defaults, and probes that wait
// 2 s for an answer rather than 500 ms, so that a test machine starved
// of CPU (the race detector, parallel packages) does not have memberlist
// declare live nodes dead. Tests of failure detection replace it; tests
// of gossip.New's defaults set Tune to nil.
func Patient(c *memberlist.Config) {
	d := memberlist.DefaultLANConfig()
	c.ProbeInterval, c.SuspicionMult, c.SuspicionMaxTimeoutMult = d.ProbeInterval, d.SuspicionMult, d.SuspicionMaxTimeoutMult
	c.AwarenessMaxMultiplier = d.AwarenessMaxMultiplier
	c.ProbeTimeout = 2 * time.Second
}

// Close closes every node that is still open.
func (c *Cluster) Close() {
	for _, g := range c.Nodes {
		_ = g.Close()
	}
}

// Addr returns node i's address (0-based).
func (c *Cluster) Addr(i int) string { return c.Transports[i].Addr() }

// Partition cuts the network between groups of nodes, given by 0-based
// index; nodes not listed form one more group.
func (c *Cluster) Partition(groups ...[]int) {
	addrs := make([][]string, len(groups))
	for i, g := range groups {
		for _, n := range g {
			addrs[i] = append(addrs[i], c.Addr(n))
		}
	}
	c.Net.Partition(addrs...)
}

// Heal removes every cut.
func (c *Cluster) Heal() { c.Net.Heal() }

// WaitMembers waits until every node in the cluster sees want members,
// failing the test after within.
func (c *Cluster) WaitMembers(tb testing.TB, want int, within time.Duration, nodes ...int) {
	tb.Helper()
	if nodes == nil {
		for i := range c.Nodes {
			nodes = append(nodes, i)
		}
	}
	seen := func() []int {
		out := make([]int, len(nodes))
		for j, i := range nodes {
			out[j] = len(c.Nodes[i].Members())
		}
		return out
	}
	if !assert.Eventually(tb, func() bool {
		for _, n := range seen() {
			if n != want {
				return false
			}
		}
		return true
	}, within, 10*time.Millisecond) {
		require.FailNow(tb, fmt.Sprintf("nodes %v did not all see %d members: they see %v", nodes, want, seen()))
	}
}
