//go:build !linux

package redistest

import "syscall"

// sysProcAttr returns nil: only Linux can tie the server's life to the test
// binary's, so elsewhere a test binary that dies without running its
// cleanups leaves its servers running.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
