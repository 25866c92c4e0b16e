// Package sim is a deterministic discrete-event simulator of a hybrid
// fleet: N nodes, each a real hybrid.Limiter on one virtual clock, syncing
// with a simulated Redis-like store that keeps its leases with the same
// arithmetic as global's Lua scripts, behind a configurable round trip and
// outages. Every request is also fed to an ideal single limiter, and the
// fleet is measured against it: overshoot, false rejection, store traffic,
// convergence after a change.
//
// The Limiters are the production code, driven through SyncOnce: a sync
// runs on its own goroutine and really waits in the store while the event
// loop moves virtual time on and the node's traffic continues, so what is
// spent during a round trip is spent as it would be. The same Config gives
// the same Result, byte for byte.
//
// Early syncs, which a live Limiter starts when a lease runs low, run as
// the live loop runs them: when a key asks (internal/manual), once a
// quarter interval (at most 10 ms) has passed since the node's last sync.
package sim
