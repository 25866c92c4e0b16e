package gossiptest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// probeGrace is how long memberlist's goroutines may outlive Shutdown: a
// probe in flight waits out its timeout (the harness's Patient 2 s) on its
// own, and Shutdown does not wait for it.
const probeGrace = 5 * time.Second

// VerifyTestMain is goleak.VerifyTestMain for packages that run
// memberlist: it runs the tests, then fails the package if goroutines
// other than those opts ignore are still running probeGrace after they
// end.
//
//	func TestMain(m *testing.M) { gossiptest.VerifyTestMain(m) }
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(probeGrace)
		for {
			err := goleak.Find(opts...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Exit(code)
}
