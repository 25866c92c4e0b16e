// Package gossip is a fleet.Syncer with no central store: the fleet's
// nodes share each key's consumption with one another over
// hashicorp/memberlist.
//
// Every node keeps, per key, one entry per node: a G-counter of what the
// node consumed in the current and previous window (merged by max per
// window, so a message applied twice, late or out of order counts once),
// and the node's current lease, demand and weight (the newest wins). A
// Sync records this node's consumption, queues its changed entries for
// gossip, and grants a lease from what the node knows of the fleet: the
// fleet's remaining budget, less the leases other nodes hold, up to this
// node's share. The share is metered on the node itself, so a node that
// can no longer hear the others still keeps to it: a split fleet does not
// hand the whole quota to each side. A peer gone silent keeps its share
// reserved for Config.Grace; one that closes gracefully frees it at once.
//
// Sync does no network I/O. Updates ride memberlist's UDP gossip, one
// message per key in a TransmitLimitedQueue so that a newer update
// replaces a queued older one; what does not fit memberlist's packet
// budget goes by stream to every member. A joining or healed node catches
// up through push/pull, which carries a bounded snapshot of active keys.
// Messages are bounds-checked, versioned and size-capped; a malformed one
// is dropped and counted (Stats). With Config.SecretKey and Config.Label
// a node of another fleet can neither join nor inject counts.
//
// docs/gossip.md has the message format, sizes, the overshoot bound and
// the figures measured.
package gossip
