package redistest

import "syscall"

// sysProcAttr has the kernel kill redis-server if the test binary dies
// without running its cleanups, as it does when go test's -timeout panics
// or the run is interrupted, so that no orphaned server keeps a port.
//
// Pdeathsig fires when the thread that started the child exits, not the
// process. The Go runtime ends a thread only when a goroutine exits while
// locked to it with runtime.LockOSThread, which tests have no reason to do;
// if one did, the server would die early and the test would see it fail.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
