package httplimit_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestMain fails the package if a goroutine outlives the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}
