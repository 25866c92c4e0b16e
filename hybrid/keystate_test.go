package hybrid_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// TestKeyStateFitsItsSizeClass holds a key's state within Go's size
// class of 448 bytes: at a million keys a node holds a million of them
// (issue 21 asks for 300 bytes a key in all). It was 480 before what few
// keys need moved to keyRare; a field more should go there, or replace
// one, not take every key's state to the next class.
func TestKeyStateFitsItsSizeClass(t *testing.T) {
	t.Parallel()
	assert.LessOrEqual(t, hybrid.KeyStateSize, uintptr(448), "bytes in a key's state")
}
