package redistest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: every
// client the helpers create must be closed and every process reaped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, LeakOptions()...)
}
