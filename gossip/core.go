package gossip

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// A Core is one node's view of the fleet with no network: the per-key
// counters, leases and shares. A Gossip runs one over memberlist; callers
// that carry the bytes themselves, as the simulator (package sim) does
// over its simulated network, run one directly, so that what they
// measure is this package's own arithmetic.
//
// The caller tells a Core who its peers are (Join, Leave), hands it the
// messages its peers sent (Receive), and sends the ones it returns
// (Updates). Times come from the caller. A Core is not safe for
// concurrent use.
type Core struct {
	tab  *table
	snap int // MaxSnapshotKeys
	enc  encoder
	msg  message // Receive's, reused
}

// An Update is one key's entry, encoded for the wire. A newer Update with
// the same Name replaces an older one not yet sent, as in a Gossip's
// transmit queue.
type Update struct {
	Name string
	Msg  []byte
}

// NewCore returns the state of node name, which must not be empty. Of
// cfg, only Grace, MaxKeys, MaxPeers and MaxSnapshotKeys apply; inc
// tells this incarnation of the node from earlier ones (a Gossip uses a
// random number).
func NewCore(name string, inc uint64, cfg Config) (*Core, error) {
	if name == "" {
		return nil, fmt.Errorf("gossip: NewCore: the name is empty; peers refuse messages from a node without one")
	}
	cfg.Name = name
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return newCore(&cfg, inc), nil
}

// newCore returns the state of node cfg.Name for a validated cfg.
func newCore(cfg *Config, inc uint64) *Core {
	return &Core{tab: newTable(cfg.Name, inc, cfg), snap: cfg.MaxSnapshotKeys}
}

// Name is the node's name.
func (c *Core) Name() string { return c.tab.self.name }

func instantOf(now time.Time) instant {
	return instant{mono: now.UnixNano(), wall: now.UnixNano()}
}

// Join records peer as a live member.
func (c *Core) Join(peer string) { c.tab.join(peer, "") }

// Leave records that peer is no longer a live member at now: its share
// stays reserved for the grace period.
func (c *Core) Leave(peer string, now time.Time) { c.tab.leave(peer, instantOf(now)) }

// Sync is Gossip.Sync on this Core at now: it fails with ErrUnreachable
// when no peer is live although some did not leave.
func (c *Core) Sync(req *fleet.Request, now time.Time) (*fleet.Response, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return c.sync(req, instantOf(now))
}

// sync grants a valid request.
func (c *Core) sync(req *fleet.Request, at instant) (*fleet.Response, error) {
	v := c.tab.view(at)
	if v.alone() {
		return nil, fmt.Errorf("gossip: no peer reachable: %w", fleet.ErrUnreachable)
	}
	return c.tab.syncAll(req, at, v.split), nil
}

// Updates returns this node's entries that changed since they were last
// returned, and those due for their periodic refresh, one Update per key.
func (c *Core) Updates(now time.Time) []Update {
	var out []Update
	c.tab.pending(instantOf(now), func(k *key) {
		out = append(out, Update{Name: keyName(k.hash), Msg: c.encode(k)})
	})
	slices.SortFunc(out, func(a, b Update) int { return strings.Compare(a.Name, b.Name) }) // the table is a map
	return out
}

// Changed returns this node's entries synced since they were last
// returned, one Update per key, in the order they were synced: what a
// Gossip queues after each Sync, without a walk of the whole table.
func (c *Core) Changed(now time.Time) []Update {
	var out []Update
	c.tab.flushChanged(instantOf(now), func(k *key) {
		out = append(out, Update{Name: keyName(k.hash), Msg: c.encode(k)})
	})
	return out
}

// encode returns k's own entry as a one-key update message.
func (c *Core) encode(k *key) []byte {
	c.enc.header(kindUpdate)
	c.enc.section(c.tab.self.name, c.tab.self.inc)
	c.enc.entry(&k.own)
	return append([]byte(nil), c.enc.finish()...)
}

// Snapshot is this node's side of a push/pull, as a Gossip's memberlist
// delegate sends it: every active entry the node knows, its own first,
// relayed from any origin, at most MaxSnapshotKeys of them; nil if none.
func (c *Core) Snapshot(now time.Time) []byte {
	var w encoder
	b := c.tab.snapshot(&w, c.snap, instantOf(now))
	return append([]byte(nil), b...)
}

// Farewell returns the message a node sends its peers when it leaves on
// purpose, so that its share goes to them at once.
func (c *Core) Farewell() []byte {
	var w encoder
	w.header(kindLeave)
	w.section(c.tab.self.name, c.tab.self.inc)
	return w.finish()
}

// Receive merges a message a peer sent. A malformed one is refused with an
// error and changes nothing.
func (c *Core) Receive(msg []byte, now time.Time) error { return c.receive(msg, instantOf(now)) }

func (c *Core) receive(msg []byte, at instant) error {
	if err := c.msg.decode(msg); err != nil {
		return err
	}
	c.tab.merge(&c.msg, at)
	return nil
}

// Collect forgets what can no longer matter, as a Gossip does every
// second.
func (c *Core) Collect(now time.Time) { c.tab.gc(instantOf(now)) }
