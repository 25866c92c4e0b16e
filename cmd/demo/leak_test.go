package main

import (
	"testing"

	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
)

// TestMain fails the package if a goroutine outlives the tests: the fleet
// demo must stop every server, Limiter and gossip node it started, as it
// does on Ctrl-C.
func TestMain(m *testing.M) {
	gossiptest.VerifyTestMain(m)
}
