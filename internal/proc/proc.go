// Package proc tells a goroutine which P (the runtime's processor, one per
// GOMAXPROCS) it is running on, so that per-core data can be indexed
// without contention.
//
// Go does not export the P id. The runtime keeps procPin and procUnpin
// reachable by go:linkname for the packages that already depend on them
// and promises not to change their signatures (go.dev/issue/67401); this
// package is the one place hybridlimit relies on that.
package proc

import _ "unsafe" // for go:linkname

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// ID returns the id of the P the calling goroutine runs on, from 0 to
// GOMAXPROCS-1 at the time of the call. The goroutine may move to another
// P as soon as ID returns, so the id is a hint for spreading work, never a
// lock: two goroutines can see the same id.
func ID() int {
	id := procPin()
	procUnpin()
	return id
}
