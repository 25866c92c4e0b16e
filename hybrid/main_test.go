package hybrid_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/redistest"
)

// TestMain fails the package if a goroutine outlives the tests: Close must
// stop the sync loop, and every Redis client the tests open be closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}
