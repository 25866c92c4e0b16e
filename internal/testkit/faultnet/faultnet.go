// Package faultnet injects network faults. A Network cuts memberlist
// traffic between groups of nodes, the way a real partition does, by
// dropping their packets and refusing their streams inside each node's
// transport; a Proxy stands between TCP clients and a server, such as
// Redis, and can black-hole them. Sockets stay real; only delivery is
// withheld.
package faultnet

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrCut is returned by a dial across a cut.
var ErrCut = errors.New("faultnet: the network is cut between these nodes")

// A Network is the set of transports it wrapped, and the cuts between
// them. It is safe for concurrent use.
type Network struct {
	mu    sync.RWMutex
	group map[string]int // address -> group; unlisted addresses are group 0
}

// New returns a Network with no cuts.
func New() *Network { return &Network{} }

// Partition cuts traffic between groups: each argument is a group of
// host:port addresses, and addresses not listed form one more group.
// Traffic within a group flows; between groups it is dropped. A new
// Partition replaces the last.
func (n *Network) Partition(groups ...[]string) {
	g := map[string]int{}
	for i, addrs := range groups {
		for _, a := range addrs {
			g[a] = i + 1
		}
	}
	n.mu.Lock()
	n.group = g
	n.mu.Unlock()
}

// Heal removes every cut.
func (n *Network) Heal() {
	n.mu.Lock()
	n.group = nil
	n.mu.Unlock()
}

// Cut reports whether traffic from a to b is dropped.
func (n *Network) Cut(a, b string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.group != nil && n.group[a] != n.group[b]
}

// Wrap returns t as a node on n. The node's address is t's advertised
// one.
func (n *Network) Wrap(t memberlist.NodeAwareTransport) *Transport {
	ip, port, err := t.FinalAdvertiseAddr("", 0)
	self := ""
	if err == nil {
		self = net.JoinHostPort(ip.String(), strconv.Itoa(port))
	}
	w := &Transport{
		NodeAwareTransport: t,
		net:                n,
		self:               self,
		packets:            make(chan *memberlist.Packet),
		done:               make(chan struct{}),
	}
	go w.forward()
	return w
}

// Transport is a memberlist transport on a Network.
type Transport struct {
	memberlist.NodeAwareTransport
	net     *Network
	self    string
	packets chan *memberlist.Packet
	done    chan struct{}
	once    sync.Once
	sent    atomic.Int64
	dropped atomic.Int64
}

var _ memberlist.NodeAwareTransport = (*Transport)(nil)

// Addr returns the node's address on the network.
func (t *Transport) Addr() string { return t.self }

// BytesSent returns how many bytes the node has sent, by packet and by
// stream, since it was wrapped.
func (t *Transport) BytesSent() int64 { return t.sent.Load() }

// Dropped returns how many packets and streams the node sent across a cut:
// proof that a partition was in force.
func (t *Transport) Dropped() int64 { return t.dropped.Load() }

// WriteTo sends a packet, unless the network is cut, in which case the
// packet is silently lost, as UDP would lose it.
func (t *Transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress is WriteTo for a named node.
func (t *Transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.net.Cut(t.self, a.Addr) {
		t.dropped.Add(1)
		return time.Now(), nil
	}
	t.sent.Add(int64(len(b)))
	return t.NodeAwareTransport.WriteToAddress(b, a)
}

// PacketCh delivers the packets that are not from across a cut.
func (t *Transport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *Transport) forward() {
	in := t.NodeAwareTransport.PacketCh()
	for {
		select {
		case <-t.done:
			return
		case p := <-in:
			if p.From != nil && t.net.Cut(p.From.String(), t.self) {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.done:
				return
			}
		}
	}
}

// DialTimeout opens a stream, unless the network is cut.
func (t *Transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout is DialTimeout for a named node.
func (t *Transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.net.Cut(t.self, a.Addr) {
		t.dropped.Add(1)
		return nil, ErrCut
	}
	c, err := t.NodeAwareTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, sent: &t.sent, nw: t.net, self: t.self, peer: a.Addr}, nil
}

// Shutdown stops the transport and its forwarding goroutine.
func (t *Transport) Shutdown() error {
	err := t.NodeAwareTransport.Shutdown()
	t.once.Do(func() { close(t.done) })
	return err
}

// conn counts what is written to a stream, and fails it once a cut
// comes between its ends, as a real partition stalls a connection opened
// before it: a push/pull dialed just before a cut otherwise carried
// state saved after it (TestDocumentHealsACut, once on a loaded CI).
type conn struct {
	net.Conn
	sent       *atomic.Int64
	nw         *Network
	self, peer string
}

func (c *conn) Write(b []byte) (int, error) {
	if c.nw.Cut(c.self, c.peer) {
		return 0, ErrCut
	}
	n, err := c.Conn.Write(b)
	c.sent.Add(int64(n))
	return n, err
}

// Read checks after the read too: one blocked when the cut came must not
// deliver what the peer sent across it.
func (c *conn) Read(b []byte) (int, error) {
	if c.nw.Cut(c.peer, c.self) {
		return 0, ErrCut
	}
	n, err := c.Conn.Read(b)
	if c.nw.Cut(c.peer, c.self) {
		return 0, ErrCut
	}
	return n, err
}
