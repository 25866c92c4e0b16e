//go:build unix

package hybrid_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// processCPU is the CPU time this process, the fleet and its load, has
// used: what the nodes pay, beside Redis's CPU.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	require.NoError(tb, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
