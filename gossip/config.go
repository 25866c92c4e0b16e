package gossip

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
)

// ErrInvalidConfig is wrapped by every error New returns for a Config it
// refuses: errors.Is(err, ErrInvalidConfig) tells a bad Config from a
// failure to start. The message names the field and what it must be.
var ErrInvalidConfig = errors.New("gossip: invalid Config")

// Defaults for the zero fields of a Config; those the simulator models
// live in internal/gossipsim.
const (
	defaultBindAddr        = "0.0.0.0"
	defaultGossipInterval  = gossipsim.GossipInterval // 50ms
	defaultGossipNodes     = gossipsim.GossipNodes    // 3
	defaultRetransmitMult  = gossipsim.RetransmitMult // 12
	defaultGrace           = 30 * time.Second
	defaultRejoinInterval  = gossipsim.RejoinInterval // 2s
	defaultTCPTimeout      = 2 * time.Second
	defaultMaxKeys         = 100_000
	defaultMaxPeers        = 1024
	defaultMaxSnapshotKeys = maxSnapshotKeys
)

// Memberlist's failure detection, as New sets it before Config.Tune.
//
// Memberlist's LAN defaults (probes every 1 s, a suspicion lasting 4 ×
// log10(N) probe intervals and stretched up to 6 times while few peers
// confirm it, probes slowed up to 8 times on a node that misses acks)
// suit a fleet that must not lose a live member. But a minority side has
// few peers to confirm its suspicions, and misses every ack from across
// the cut: on those defaults the 2 of a 6-node fleet took 15–36 s to
// learn they were cut off, long past the ladder's first 5 s step,
// spending their full share all that while. These settings have them
// learn it in 3.4–4.9 s (docs/gossip.md). The cost: a live node has 3 ×
// log10(N) probe intervals (1.2 s among 6), stretched at most 2 times,
// to refute a suspicion, and a node starved of CPU does not slow its own
// probes; a refutation is one gossip message, and a false split shorter
// than the ladder's first step costs nothing.
const (
	defaultProbeInterval           = gossipsim.ProbeInterval // 500ms
	defaultProbeTimeout            = gossipsim.ProbeTimeout  // 300ms
	defaultSuspicionMult           = gossipsim.SuspicionMult // 3
	defaultSuspicionMaxTimeoutMult = gossipsim.SuspicionMaxTimeoutMult
	defaultAwarenessMaxMultiplier  = 1
	// defaultDeadNodeReclaimTime lets a node that failed come back under
	// its name at a new address (a StatefulSet pod restarted on a new IP)
	// once it has been dead this long; memberlist's own default refuses
	// it until the dead node is forgotten.
	defaultDeadNodeReclaimTime = time.Second
)

// maxSnapshotKeys keeps a push/pull snapshot under the decoder's size cap.
const maxSnapshotKeys = 10_000

// Config configures a Gossip. The zero value is valid apart from Seeds:
// a node with no seeds starts a fleet of its own.
type Config struct {
	// Name identifies this node in the fleet and must be unique in it.
	// Default: the host name and eight random hex digits.
	Name string

	// BindAddr and BindPort are where the node listens, on both UDP and
	// TCP. BindAddr defaults to "0.0.0.0", every interface; a
	// BindPort of 0 picks a free port, which Addr reports.
	BindAddr string
	BindPort int

	// AdvertiseAddr and AdvertisePort are the address peers should use,
	// if not the bound one (behind NAT, say). An AdvertisePort of 0 means
	// the bound port.
	AdvertiseAddr string
	AdvertisePort int

	// Seeds are host:port addresses of fleet members to join at start and
	// to join again every RejoinInterval while any of them is not a
	// member, so a partition heals even after memberlist has forgotten
	// the other side. A host may be a DNS name, such as a Kubernetes
	// headless service's, resolving to many members; it is resolved
	// again at every re-join, so members that restart with new addresses
	// are found. A seed that resolves to this node's own address is this
	// node: a node whose every seed does is a whole fleet of one, as the
	// first pod of a service is.
	Seeds []string

	// LookupHost resolves a seed's host name to addresses. Default
	// net.DefaultResolver.LookupHost; tests and programs with their own
	// discovery set their own.
	LookupHost func(ctx context.Context, host string) ([]string, error)

	// SecretKey, if set, encrypts and authenticates all gossip with
	// AES-GCM; it must be 16, 24 or 32 bytes. Keyring, if set, holds the
	// keys for a rotation (see memberlist.Keyring); SecretKey is then
	// added to it and made primary. A node without the fleet's key cannot
	// join it, and its messages are dropped.
	SecretKey []byte
	Keyring   *memberlist.Keyring

	// Label is written on every packet and stream; a node with another
	// label is refused. It keeps separate fleets on one network apart
	// even without encryption. At most 255 bytes.
	Label string

	// GossipInterval is how often queued updates are sent to GossipNodes
	// random peers. Default 50ms, 3.
	GossipInterval time.Duration
	GossipNodes    int

	// RetransmitMult sets how many times an update is gossiped before it
	// is dropped from the queue: RetransmitMult * ceil(log10(N+1)) for N
	// nodes. Memberlist's own default is 4, but memberlist's messages are
	// passed on by every node that receives them and these updates are
	// not (each node sends only its own), so each must reach every peer
	// itself: with 12, an update among 5 nodes misses a given peer about
	// once in 250 times, and the next update or refresh carries the same
	// counts. Default 12.
	RetransmitMult int

	// Grace is how long a peer that has gone silent (crashed, or across a
	// partition) keeps its share of each key reserved. A peer that leaves
	// gracefully frees its share at once. Default 30s.
	Grace time.Duration

	// RejoinInterval is how often the Seeds are resolved again and those
	// not members joined, with the peers that went away without leaving;
	// at least once a second while the node has no peer. It bounds how
	// long the sides of a split that outlasted memberlist's 30 s of
	// gossip to the dead take to merge after the heal. Default 2s.
	RejoinInterval time.Duration

	// TCPTimeout bounds each stream to a peer: joins, push/pull and
	// updates too large for a UDP packet. Default 2s.
	TCPTimeout time.Duration

	// MaxKeys bounds the keys tracked, this node's and its peers'; entries
	// for new keys past it are dropped (and counted in Stats). This
	// node's own keys are always tracked. Default 100,000.
	MaxKeys int

	// MaxPeers bounds the distinct node names remembered from the
	// network. Default 1,024.
	MaxPeers int

	// MaxSnapshotKeys bounds the entries in a push/pull snapshot, at most
	// 10,000. Default 10,000.
	MaxSnapshotKeys int

	// WrapTransport, if set, wraps the node's network transport; tests use
	// it to inject faults.
	WrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport

	// Tune, if set, is given memberlist's configuration last, for settings
	// this Config does not name (probe intervals, say). It must not
	// replace the Delegate, Events or Transport.
	Tune func(*memberlist.Config)

	// Logger receives memberlist's log. Default: discarded.
	Logger *log.Logger

	// Clock is the time source. Default: the system clock, or in a
	// testing/synctest bubble the bubble's fake clock.
	Clock clock.Clock
}

// withDefaults returns c with its zero fields set to their defaults, or
// an error naming the first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Name = host + "-" + hex.EncodeToString(b[:])
	}
	if c.BindAddr == "" {
		c.BindAddr = defaultBindAddr
	}
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"GossipInterval", &c.GossipInterval, defaultGossipInterval},
		{"Grace", &c.Grace, defaultGrace},
		{"RejoinInterval", &c.RejoinInterval, defaultRejoinInterval},
		{"TCPTimeout", &c.TCPTimeout, defaultTCPTimeout},
	}
	for _, d := range durations {
		if *d.v < 0 {
			return c, fmt.Errorf("gossip: Config.%s is %v; it must not be negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"GossipNodes", &c.GossipNodes, defaultGossipNodes},
		{"RetransmitMult", &c.RetransmitMult, defaultRetransmitMult},
		{"MaxKeys", &c.MaxKeys, defaultMaxKeys},
		{"MaxPeers", &c.MaxPeers, defaultMaxPeers},
		{"MaxSnapshotKeys", &c.MaxSnapshotKeys, defaultMaxSnapshotKeys},
	}
	for _, n := range ints {
		if *n.v < 0 {
			return c, fmt.Errorf("gossip: Config.%s is %d; it must not be negative", n.name, *n.v)
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	if c.Clock == nil {
		c.Clock = clock.Default()
	}
	if c.LookupHost == nil {
		c.LookupHost = net.DefaultResolver.LookupHost
	}
	switch {
	case len(c.Name) > maxNameLen:
		return c, fmt.Errorf("gossip: Config.Name is %d bytes; it must be at most %d", len(c.Name), maxNameLen)
	case net.ParseIP(c.BindAddr) == nil:
		return c, fmt.Errorf("gossip: Config.BindAddr %q is not an IP address", c.BindAddr)
	case c.BindPort < 0 || c.BindPort > 65535:
		return c, fmt.Errorf("gossip: Config.BindPort %d is not a port (0 picks a free one)", c.BindPort)
	case c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil:
		return c, fmt.Errorf("gossip: Config.AdvertiseAddr %q is not an IP address", c.AdvertiseAddr)
	case c.AdvertisePort < 0 || c.AdvertisePort > 65535:
		return c, fmt.Errorf("gossip: Config.AdvertisePort %d is not a port", c.AdvertisePort)
	case len(c.SecretKey) != 0 && len(c.SecretKey) != 16 && len(c.SecretKey) != 24 && len(c.SecretKey) != 32:
		return c, fmt.Errorf("gossip: Config.SecretKey is %d bytes; an AES key is 16, 24 or 32", len(c.SecretKey))
	case len(c.Label) > 255:
		return c, fmt.Errorf("gossip: Config.Label is %d bytes; it must be at most 255", len(c.Label))
	case c.MaxSnapshotKeys > maxSnapshotKeys:
		return c, fmt.Errorf("gossip: Config.MaxSnapshotKeys is %d; it must be at most %d", c.MaxSnapshotKeys, maxSnapshotKeys)
	}
	for _, s := range c.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return c, fmt.Errorf("gossip: Config.Seeds: %q is not host:port: %v", s, err)
		}
	}
	return c, nil
}
