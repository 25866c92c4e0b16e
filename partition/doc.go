// Package partition holds the state machines that decide how a node
// behaves when its fleet is out of reach: a circuit breaker that stops
// calling a syncer that keeps failing, and the emergency ladder that
// tightens a node's own limit the longer it has been cut off.
//
// Both are pure: no goroutines, no I/O, no clock of their own. Every
// method takes the time from its caller, so the hybrid Limiter drives
// them on its injected clock and the simulator on a virtual one. Neither
// A Ladder never changes once made and is safe for concurrent use; a
// Breaker is not, and its owner serializes calls to it.
package partition
