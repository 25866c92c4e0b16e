// Package hybrid is hybridlimit's front door: a rate limiter for a fleet of
// nodes that decides every request in memory and reconciles with the fleet
// in the background.
//
// A Limiter holds Policies; each key is matched to one, once, by prefix or
// by Config.Resolve. A Hybrid policy (the default) decides from a lease:
// tokens this node took from the fleet's shared budget at its last sync,
// sized to its share of the key's quota. Admitting a request is one atomic
// compare-and-swap, with no lock and no allocation. Every Config.Interval
// the sync loop reports each active key's consumption and demand forecast
// to the fleet (a fleet.Syncer: Redis, or memberlist gossip) in one batched
// call and installs the new leases; a key whose lease runs low before then
// gets an early sync in the background, and the request path never waits
// for it.
//
// Local policies limit the node alone; Strict policies decide every request
// in Redis. When the fleet cannot be reached, a node first spends what it
// leased, then follows the policy's FailMode: by default it keeps limiting
// to its last known share, times an emergency ladder that tightens the
// longer the outage lasts, and marks its decisions Degraded. A circuit
// breaker keeps the node from waiting on a dead fleet; Config.Failover
// (gossip beside Redis) keeps a fleet-wide view while Redis is down; and
// Limiter.Health says where the node stands. Config.OnHealthChange hears
// each change of it, and Limiter.Stats counts what the node decided, its
// sync rounds and the keys refused most, for metrics (package metrics),
// at no cost to the requests.
//
// Time is the runtime's monotonic clock; a Limiter made in a
// testing/synctest bubble runs on the bubble's fake time instead, so a test
// of code that uses it waits out a window with time.Sleep, at once (see
// docs/http.md, "Testing a handler"). Only Local policies work in a
// bubble: a fleet's network calls never block durably there.
//
// See docs/architecture.md for the data flow and the accuracy model, and
// docs/partitions.md for outages, with measured figures.
package hybrid
