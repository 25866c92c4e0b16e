// Package gossipsim lets the simulator (package sim) run package gossip's
// own state, a core, over its simulated network, so that what it
// measures is gossip's arithmetic and not a model of it. They are the
// simulator's hooks, not an API: package gossip sets NewCore and
// UpdateBudget at init.
package gossipsim

import (
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// A Core is one node's view of the fleet with no network: the per-key
// counters, leases and shares. A gossip.Gossip runs one over memberlist.
//
// The caller tells a Core who its peers are (Join, Leave), hands it the
// messages its peers sent (Receive), and sends the ones it returns
// (Updates). Times come from the caller. A Core is not safe for
// concurrent use.
type Core interface {
	// Name is the node's name.
	Name() string
	// Join and Leave tell the Core that peer joined or left the fleet.
	Join(peer string)
	Leave(peer string, now time.Time)
	// Sync is gossip.Gossip.Sync on the Core's state at now.
	Sync(req *fleet.Request, now time.Time) (*fleet.Response, error)
	// Updates returns every key this node has an entry for; Changed
	// those changed since the last call of either, to send.
	Updates(now time.Time) []Update
	Changed(now time.Time) []Update
	// Snapshot is the node's state for a push/pull with a peer, and
	// Farewell its message on leaving.
	Snapshot(now time.Time) []byte
	Farewell() []byte
	// Receive merges a peer's message.
	Receive(msg []byte, now time.Time) error
	// Collect forgets what has aged out.
	Collect(now time.Time)
}

// An Update is one key's entry, encoded for the wire. A newer Update with
// the same Name replaces an older one not yet sent, as in a Gossip's
// transmit queue.
type Update struct {
	Name string
	Msg  []byte
}

// Set by package gossip.
var (
	// NewCore returns the state of node name, which must not be empty,
	// for cfg, a gossip.Config, of which only Grace, MaxKeys, MaxPeers
	// and MaxSnapshotKeys apply; inc tells this incarnation of the node
	// from earlier ones (a Gossip uses a random number).
	NewCore func(name string, inc uint64, cfg any) (Core, error)
	// UpdateBudget is how many of a sync's changed keys a Gossip with
	// cfg, a gossip.Config, in a fleet of nodes, queues for gossip rather
	// than sending by stream.
	UpdateBudget func(cfg any, nodes int, interval time.Duration) int
)

// Transmissions is how many times an update is gossiped in a fleet of
// nodes before it leaves the queue: mult × ceil(log10(nodes+1)), as
// memberlist's transmit-limited queue counts them. The simulator sends
// its updates as often.
func Transmissions(mult, nodes int) int {
	return mult * int(math.Ceil(math.Log10(float64(nodes+1))))
}
