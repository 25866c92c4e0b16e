//go:build !unix

package hybrid_test

import (
	"testing"
	"time"
)

// processCPU is 0 where getrusage is not: BenchmarkFleetManyKeys then
// reports no nodes-cores.
func processCPU(testing.TB) time.Duration { return 0 }
