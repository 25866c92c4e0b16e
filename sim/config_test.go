package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaultConfigIsRunsDefaults checks that DefaultConfig says what Run
// does with a zero Config, so that the demo's flags show the real
// defaults.
func TestDefaultConfigIsRunsDefaults(t *testing.T) {
	t.Parallel()
	got, err := Config{}.withDefaults()
	require.NoError(t, err)
	got.Limit, got.GossipDelay = 0, 0 // derived from other fields
	require.Equal(t, DefaultConfig(), got)
}
