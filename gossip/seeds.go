package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Seeds are resolved here rather than left to memberlist, for two
// reasons. A seed that names this node (the first pod behind a headless
// service resolves the service's name to its own address alone; a fleet
// of one lists itself) must count as this node and not as a member that
// never answers: otherwise a lone node would never count as joined and
// would fall down its Limiter's ladder with nobody to share with. And a
// DNS seed names many nodes, so whether it "is a member" can only be
// asked of the addresses it resolves to, compared with the members'
// addresses; a name compared with addresses never matches, and the
// re-join would try it for ever.
//
// A node whose seeds all resolve, to its own address only, is a whole
// fleet of one, and serves its full limit, for as long as the latest
// resolution says so. Once they resolve to other addresses too (a pod
// published but not yet listening; gossip blocked between pods) a node
// that has never had a peer is unreachable again until one answers:
// two pods that cannot talk must not each serve the whole limit in
// silence. A seed that fails to resolve keeps a node that has never had a
// peer unreachable, with the lookup's error in Sync's: it is a fleet the
// node expects but cannot see.

// seedSet is one resolution of the Seeds.
type seedSet struct {
	peers []string // host:port of the seeds' addresses that are not this node
	err   error    // the lookups that failed, joined
}

// alone reports whether every seed resolved, and to this node only.
func (s seedSet) alone() bool { return s.err == nil && len(s.peers) == 0 }

// resolveSeeds looks up every seed's host with the configured LookupHost,
// each lookup bounded by TCPTimeout, and returns the addresses that are
// not this node, without duplicates.
func (g *Gossip) resolveSeeds(ctx context.Context) seedSet {
	var s seedSet
	seen := map[string]bool{}
	var errs []error
	for _, seed := range g.cfg.Seeds {
		host, port, _ := net.SplitHostPort(seed) // validated by withDefaults
		ips := []string{host}
		if net.ParseIP(host) == nil {
			lctx, cancel := context.WithTimeout(ctx, g.cfg.TCPTimeout)
			var err error
			ips, err = g.cfg.LookupHost(lctx, host)
			cancel()
			if err == nil && len(ips) == 0 {
				err = errors.New("no addresses")
			}
			if err != nil {
				g.stats.seedLookupFailures.Add(1)
				errs = append(errs, fmt.Errorf("resolving seed %q: %w", seed, err))
				continue
			}
		}
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, port)
			if seen[addr] || g.isSelf(net.ParseIP(ip), port) {
				continue
			}
			seen[addr] = true
			s.peers = append(s.peers, addr)
		}
	}
	s.err = errors.Join(errs...)
	return s
}

// isSelf reports whether ip:port reaches this node: its advertised
// address, or, for a node bound to every interface on that port, any
// address of this host's.
func (g *Gossip) isSelf(ip net.IP, port string) bool {
	if ip == nil {
		return false
	}
	p, err := strconv.Atoi(port)
	if err != nil || (p != g.port && p != g.bindPort) {
		return false
	}
	bound := net.ParseIP(g.cfg.BindAddr)
	if ip.Equal(g.ip) || ip.Equal(bound) {
		return true
	}
	// "localhost" names both 127.0.0.1 and ::1: a node bound to a
	// loopback address of one family is what the other one means.
	if p == g.bindPort && bound.IsLoopback() && ip.IsLoopback() && (bound.To4() == nil) != (ip.To4() == nil) {
		return true
	}
	if !bound.IsUnspecified() || p != g.bindPort {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// joinSeeds resolves the seeds and joins those that are not members yet
// (all of them, with live nil). The resolution is kept for Sync, which
// tells from it whether a node that never had a peer is a fleet of one.
func (g *Gossip) joinSeeds(ctx context.Context, live map[string]bool) {
	s := g.resolveSeeds(ctx)
	g.seeds.Store(&s)
	var addrs []string
	for _, a := range s.peers {
		if !live[a] {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) > 0 {
		g.join(addrs)
	}
}

// rejoinLoop resolves the seeds again and joins those, and peers that
// went away without leaving, that are not members: memberlist stops
// gossiping to a dead node after a while, so two sides of a partition
// would otherwise never find each other again, and a DNS seed's
// addresses change as pods come and go. A node with no peer tries every
// lonelyRejoin at least, so that two nodes that started at once, each
// seeing only itself in DNS, find each other soon.
func (g *Gossip) rejoinLoop(ctx context.Context) {
	defer g.wg.Done()
	for {
		every := g.cfg.RejoinInterval
		if g.nodes.Load() <= 1 && len(g.cfg.Seeds) > 0 {
			every = min(every, lonelyRejoin)
		}
		t := g.clk.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		live := g.liveAddrs()
		g.joinSeeds(ctx, live)
		if addrs := g.lost(live); len(addrs) > 0 {
			g.join(addrs)
		}
	}
}

// lonelyRejoin bounds the re-join interval of a node with no peer.
const lonelyRejoin = time.Second

// liveAddrs returns the addresses of the live members, this node's too.
func (g *Gossip) liveAddrs() map[string]bool {
	live := map[string]bool{g.addr: true}
	for _, n := range g.peers() {
		live[n.Address()] = true
	}
	return live
}

// lost returns the peers that went away without leaving, within the
// forget horizon, and are not live members.
func (g *Gossip) lost(live map[string]bool) []string {
	var out []string
	now := g.now()
	g.lock()
	defer g.mu.Unlock()
	tab := g.core.tab
	for _, p := range tab.peers {
		if p != tab.self && !p.alive && !p.left && p.addr != "" && !live[p.addr] && now.mono-p.downAt <= tab.forget {
			out = append(out, p.addr)
		}
	}
	return out
}
