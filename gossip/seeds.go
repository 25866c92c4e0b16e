package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
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
// fleet of one: it counts as joined, and serves its full limit. A seed
// that fails to resolve keeps a node that has never joined unreachable,
// with the lookup's error in Sync's: it is a fleet the node expects but
// cannot see.

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
// (all of them, with live nil). A node whose seeds are all itself is
// marked joined: it is a fleet of one. The last resolution's error is
// kept for Sync's.
func (g *Gossip) joinSeeds(ctx context.Context, live map[string]bool) {
	s := g.resolveSeeds(ctx)
	g.seedErr.Store(&s)
	if s.alone() {
		g.mu.Lock()
		g.joined = true
		g.mu.Unlock()
		return
	}
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
