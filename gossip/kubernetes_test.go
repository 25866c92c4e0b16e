package gossip_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
)

// headless is a DNS name as a Kubernetes headless service publishes it:
// the addresses of the pods behind it, changing as pods come and go.
type headless struct {
	name string
	ips  atomic.Pointer[[]string]
}

func (h *headless) set(ips ...string) { ips = slices.Clone(ips); h.ips.Store(&ips) }

// lookup is a gossip.Config.LookupHost.
func (h *headless) lookup(_ context.Context, host string) ([]string, error) {
	if host != h.name {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return slices.Clone(*h.ips.Load()), nil
}

// commonPort returns a port free for TCP and UDP on every one of ips, as
// every pod of a service listens on the same port at its own address.
func commonPort(t *testing.T, ips ...string) int {
	t.Helper()
	for range 20 {
		p := freePort(t, ips[0])
		free := true
		for _, ip := range ips[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
			if err != nil {
				free = false
				break
			}
			u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(p)))
			_ = l.Close()
			if err != nil {
				free = false
				break
			}
			_ = u.Close()
		}
		if free {
			return p
		}
	}
	t.Fatal("no port free on every address")
	return 0
}

// TestHeadlessService runs a fleet the way a Kubernetes Deployment or
// StatefulSet behind a headless service does, on 127.0.0.x (Linux answers
// on all of 127/8): every pod lists the service's one DNS name, which
// resolves to every pod's address on one port. The first pod is a fleet
// of one; later pods find all the others through the name; then a rolling
// restart replaces every pod with one at a new address: one keeping its
// name (a StatefulSet), one with a new name (a Deployment), and one that
// crashed without leaving and came back under its name.
func TestHeadlessService(t *testing.T) {
	t.Parallel()
	ips := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}
	port := commonPort(t, ips...)
	dns := &headless{name: "limits.prod.svc.cluster.local"}
	seed := net.JoinHostPort(dns.name, strconv.Itoa(port))
	network := faultnet.New()
	pods := map[string]*gossip.Gossip{} // by IP
	start := func(name, ip string) {
		t.Helper()
		g, err := gossip.New(gossip.Config{
			Name: name, BindAddr: ip, BindPort: port, Seeds: []string{seed}, LookupHost: dns.lookup,
			RejoinInterval: 200 * time.Millisecond,
			WrapTransport:  func(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport { return network.Wrap(t) },
		})
		require.NoError(t, err, "starting %s at %s", name, ip)
		t.Cleanup(func() { _ = g.Close() })
		pods[ip] = g
	}
	// whole waits until every pod sees exactly want (name@ip) and can
	// sync, and a count made on one pod reaches the others.
	round := 0
	whole := func(want ...string) {
		t.Helper()
		slices.Sort(want)
		begin := time.Now()
		require.Eventually(t, func() bool {
			for _, g := range pods {
				var got []string
				for _, m := range g.Members() {
					host, _, _ := net.SplitHostPort(m.Addr)
					got = append(got, m.Name+"@"+host)
				}
				if !slices.Equal(got, want) {
					return false
				}
			}
			return true
		}, 20*time.Second, 20*time.Millisecond, "every pod sees %v", want)
		round++
		k := fmt.Sprintf("k%d", round)
		var first *gossip.Gossip
		for _, g := range pods {
			if first == nil {
				first = g
				sync(t, g, k, window, 7, 1)
				continue
			}
			require.Eventually(t, func() bool { return sync(t, g, k, window, 0, 1).Used == 7 }, 5*time.Second, 10*time.Millisecond,
				"%s sees %s's count", g.Name(), first.Name())
		}
		t.Logf("whole as %v after %v", want, time.Since(begin).Round(time.Millisecond))
	}

	// The first pod: the name resolves to it alone.
	dns.set(ips[0])
	start("limits-0", ips[0])
	whole("limits-0@127.0.0.1")

	// Scale to 3: each new pod is published as it starts.
	dns.set(ips[:2]...)
	start("limits-1", ips[1])
	dns.set(ips[:3]...)
	start("limits-2", ips[2])
	whole("limits-0@127.0.0.1", "limits-1@127.0.0.2", "limits-2@127.0.0.3")

	// Rolling restart. A StatefulSet pod leaves and comes back under its
	// name at a new address.
	require.NoError(t, pods[ips[0]].Close())
	delete(pods, ips[0])
	dns.set(ips[1], ips[2])
	dns.set(ips[1], ips[2], ips[3])
	start("limits-0", ips[3])
	whole("limits-0@127.0.0.4", "limits-1@127.0.0.2", "limits-2@127.0.0.3")

	// A Deployment pod is replaced by one with a new name.
	require.NoError(t, pods[ips[1]].Close())
	delete(pods, ips[1])
	dns.set(ips[2], ips[3], ips[4])
	start("limits-7f9c", ips[4])
	whole("limits-0@127.0.0.4", "limits-7f9c@127.0.0.5", "limits-2@127.0.0.3")

	// A pod crashes (cut off, so that its farewell never arrives) and
	// comes back under its name at a new address while its peers still
	// count it a member: they take it back once they have declared the
	// old one dead.
	network.Partition([]string{pods[ips[2]].Addr()})
	_ = pods[ips[2]].Close()
	delete(pods, ips[2])
	dns.set(ips[3], ips[4], ips[5])
	start("limits-2", ips[5])
	whole("limits-0@127.0.0.4", "limits-7f9c@127.0.0.5", "limits-2@127.0.0.6")
	network.Heal()
	assert.Len(t, pods, 3)
}

// TestLoneNodeThenAPeerPublished starts the first pod of a service, a
// fleet of one, then publishes a second address where nothing answers
// (a pod not yet listening, or gossip blocked between pods): the lone
// node, which never had a peer, must say it is cut off rather than go on
// serving the whole limit beside a pod it cannot hear. Once the second
// pod answers, both are whole.
func TestLoneNodeThenAPeerPublished(t *testing.T) {
	t.Parallel()
	ips := []string{"127.0.0.7", "127.0.0.8"}
	port := commonPort(t, ips...)
	dns := &headless{name: "limits.prod.svc.cluster.local"}
	start := func(name, ip string) *gossip.Gossip {
		g, err := gossip.New(gossip.Config{Name: name, BindAddr: ip, BindPort: port, LookupHost: dns.lookup,
			Seeds: []string{net.JoinHostPort(dns.name, strconv.Itoa(port))}, RejoinInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	reachable := func(g *gossip.Gossip) bool {
		_, err := g.Sync(t.Context(), &fleet.Request{Interval: time.Second})
		return err == nil
	}
	dns.set(ips[0])
	first := start("limits-0", ips[0])
	require.True(t, reachable(first), "a fleet of one")
	dns.set(ips...)
	require.Eventually(t, func() bool { return !reachable(first) }, 5*time.Second, 10*time.Millisecond,
		"a published peer that never answered makes the lone node unreachable")
	second := start("limits-1", ips[1])
	require.Eventually(t, func() bool { return reachable(first) && reachable(second) }, 5*time.Second, 10*time.Millisecond)
	assert.Len(t, first.Members(), 2)
}
