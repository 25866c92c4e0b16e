package local_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a goroutine outlives the tests: a Limiter
// starts none, and every Wait must return.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
