package gossip_test

import (
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// TestMain fails the package if any goroutine outlives the tests: every
// Gossip's Close must stop memberlist and its own loops.
func TestMain(m *testing.M) {
	gossiptest.VerifyTestMain(m)
}
