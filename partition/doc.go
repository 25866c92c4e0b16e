// Package partition describes how a node behaves when its fleet is out
// of reach: the emergency ladder that tightens a node's own limit the
// longer it has been cut off (Ladder, Step, DefaultSteps), the Health and
// Level a hybrid Limiter reports, and the configuration of the circuit
// breaker that stops a node calling a fleet that keeps failing
// (BreakerConfig; the breaker itself is internal to the module).
//
// A Ladder is pure: no goroutines, no I/O, no clock of its own. Its
// methods take the time from their caller, so the hybrid Limiter drives
// it on its injected clock and the simulator on a virtual one. A Ladder
// never changes once made and is safe for concurrent use.
package partition
