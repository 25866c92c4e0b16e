package sim_test

import (
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
)

// TestMain fails the package if a goroutine outlives the tests: a run must
// leave no sync waiting in the simulated store. Memberlist's probes of
// the reality tests' fleets may outlive them by their timeout.
func TestMain(m *testing.M) {
	gossiptest.VerifyTestMain(m, redistest.LeakOptions()...)
}
