package hybrid_test

import (
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestMain fails the package if a goroutine outlives the tests: Close must
// stop the sync loop, every Redis client the tests open be closed, and
// every gossip node be shut down.
func TestMain(m *testing.M) {
	gossiptest.VerifyTestMain(m, redistest.LeakOptions()...)
}
