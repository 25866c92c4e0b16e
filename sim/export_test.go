package sim

import "time"

// Coverage is the simulator's coverage figure, for measuring real
// memberlist with the same arithmetic: Sent each version first, in the
// order of their stamps, then Heard each receipt in time order.
type Coverage struct {
	c     *coverage
	start time.Time
}

// NewCoverage follows nodes (0-based) over a run from start to end.
func NewCoverage(nodes int, start, end time.Time) *Coverage {
	return &Coverage{c: newCoverage(nodes, start.UnixMilli(), int64(end.Sub(start))), start: start}
}

// Sent records origin's version of key (a gossip update's Name) stamped
// stamp, sent to a fleet of peers others.
func (c *Coverage) Sent(origin int, key string, stamp uint64, peers int) {
	c.c.sent([]version{c.c.version(origin, key, stamp)}, peers)
}

// Heard records that receiver heard origin's version of key stamped
// stamp at at.
func (c *Coverage) Heard(receiver, origin int, key string, stamp uint64, at time.Time) {
	c.c.heard(receiver, []version{c.c.version(origin, key, stamp)}, int64(at.Sub(c.start)))
}

// Percent is the figure.
func (c *Coverage) Percent() float64 { return c.c.percent() }

// UpdateStamp is a one-key update's stamp, and the offset of its entry,
// whose first 8 bytes are its key's hash.
func UpdateStamp(msg []byte) (stamp uint64, entry int) { return updateStamp(msg), entryOffset(msg) }
