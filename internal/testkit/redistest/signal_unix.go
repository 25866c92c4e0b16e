//go:build unix

package redistest

import (
	"errors"
	"syscall"
)

// Pause stops process pid (SIGSTOP): a server that hangs, holding its
// connections and answering nothing, until Resume.
func Pause(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func Resume(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }

// exists reports whether process pid is still there.
func exists(pid int) (bool, error) {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return false, nil
	}
	return true, err
}
