package gossip_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: every
// Gossip's Close must stop memberlist and its own loops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
