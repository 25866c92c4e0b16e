package gossip

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/gossipsim"
)

// core is one node's view of the fleet with no network: the per-key
// counters, leases and shares (see gossipsim.Core, which the simulator
// runs it as). A Gossip runs one over memberlist. Not safe for concurrent
// use.
type core struct {
	tab  *table
	snap int // MaxSnapshotKeys
	enc  encoder
	msg  message // Receive's, reused
}

// encoded is one key's entry, encoded for the wire.
type encoded = gossipsim.Update

var _ gossipsim.Core = (*core)(nil)

func init() {
	gossipsim.NewCore = func(name string, inc uint64, cfg any) (gossipsim.Core, error) {
		return newNamedCore(name, inc, cfg.(Config))
	}
	gossipsim.UpdateBudget = func(cfg any, nodes int, interval time.Duration) int {
		return updateBudget(cfg.(Config), nodes, interval)
	}
}

// newNamedCore returns the state of node name, which must not be empty.
// Of cfg, only Grace, MaxKeys, MaxPeers and MaxSnapshotKeys apply; inc
// tells this incarnation of the node from earlier ones (a Gossip uses a
// random number).
func newNamedCore(name string, inc uint64, cfg Config) (*core, error) {
	if name == "" {
		return nil, fmt.Errorf("gossip: the core's name is empty; peers refuse messages from a node without one")
	}
	cfg.Name = name
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newCore(&cfg, inc), nil
}

// newCore returns the state of node cfg.Name for a validated cfg.
func newCore(cfg *Config, inc uint64) *core {
	return &core{tab: newTable(cfg.Name, inc, cfg), snap: cfg.MaxSnapshotKeys}
}

// Name is the node's name.
func (c *core) Name() string { return c.tab.self.name }

func instantOf(now time.Time) instant {
	return instant{mono: now.UnixNano(), wall: now.UnixNano()}
}

// Join records peer as a live member.
func (c *core) Join(peer string) { c.tab.join(peer, "") }

// Leave records that peer is no longer a live member at now: its share
// stays reserved for the grace period.
func (c *core) Leave(peer string, now time.Time) { c.tab.leave(peer, instantOf(now)) }

// Sync is Gossip.Sync on this Core at now: it fails with ErrUnreachable
// when no peer is live although some did not leave.
func (c *core) Sync(req *fleet.Request, now time.Time) (*fleet.Response, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return c.sync(req, instantOf(now))
}

// sync grants a valid request.
func (c *core) sync(req *fleet.Request, at instant) (*fleet.Response, error) {
	v := c.tab.view(at)
	if v.alone() {
		return nil, fmt.Errorf("gossip: no peer reachable: %w", fleet.ErrUnreachable)
	}
	return c.tab.syncAll(req, at, v.split), nil
}

// Updates returns this node's entries that changed since they were last
// returned, and those due for their periodic refresh, one Update per key.
func (c *core) Updates(now time.Time) []encoded {
	var out []encoded
	c.tab.pending(instantOf(now), func(k *key) {
		out = append(out, encoded{Name: keyName(k.hash), Msg: c.encode(k)})
	})
	slices.SortFunc(out, func(a, b encoded) int { return strings.Compare(a.Name, b.Name) }) // the table is a map
	return out
}

// Changed returns this node's entries synced since they were last
// returned, one Update per key, in the order they were synced: what a
// Gossip queues after each Sync, without a walk of the whole table.
func (c *core) Changed(now time.Time) []encoded {
	var out []encoded
	c.tab.flushChanged(instantOf(now), func(k *key) {
		out = append(out, encoded{Name: keyName(k.hash), Msg: c.encode(k)})
	})
	return out
}

// encode returns k's own entry as a one-key update message.
func (c *core) encode(k *key) []byte {
	c.enc.header(kindUpdate)
	c.enc.section(c.tab.self.name, c.tab.self.inc)
	c.enc.entry(&k.own)
	return append([]byte(nil), c.enc.finish()...)
}

// Snapshot is this node's side of a push/pull, as a Gossip's memberlist
// delegate sends it: every active entry the node knows, its own first,
// relayed from any origin, at most MaxSnapshotKeys of them; nil if none.
func (c *core) Snapshot(now time.Time) []byte {
	var w encoder
	b := c.tab.snapshot(&w, c.snap, instantOf(now))
	return append([]byte(nil), b...)
}

// Farewell returns the message a node sends its peers when it leaves on
// purpose, so that its share goes to them at once.
func (c *core) Farewell() []byte {
	var w encoder
	w.header(kindLeave)
	w.section(c.tab.self.name, c.tab.self.inc)
	return w.finish()
}

// Receive merges a message a peer sent. A malformed one is refused with an
// error and changes nothing.
func (c *core) Receive(msg []byte, now time.Time) error { return c.receive(msg, instantOf(now)) }

func (c *core) receive(msg []byte, at instant) error {
	if err := c.msg.decode(msg); err != nil {
		return err
	}
	c.tab.merge(&c.msg, at)
	return nil
}

// Collect forgets what can no longer matter, as a Gossip does every
// second.
func (c *core) Collect(now time.Time) { c.tab.gc(instantOf(now)) }
