package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServiceDemo runs the fleet demo with -service, as a user would:
// three hybridlimitd processes asked through their HTTP check endpoint,
// the last killed at a third of the run and started again at two
// thirds. Every answer is an admission or a refusal, the hot tenant is
// held near its limit throughout, and the restarted node serves again.
func TestServiceDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds hybridlimitd and runs three processes for 9 s")
	}
	t.Parallel()
	// The binary, built as this test was (with -race under make test, so
	// that the packages compiled for hybridlimitd's own tests are reused).
	bin := filepath.Join(t.TempDir(), "hybridlimitd")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "../hybridlimitd")...).CombinedOutput()
	require.NoError(t, err, "%s", out)

	var stdout, stderr bytes.Buffer
	code := fleetMain(context.Background(), []string{"--service", "--hybridlimitd", bin, "--nodes", "3", "--duration", "9s", "--rate", "60", "--limit", "40", "--json"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	var sum fleetSummary
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())
	t.Logf("%+v", sum)
	require.Len(t, sum.PerNode, 3)
	for _, n := range sum.PerNode {
		assert.Positive(t, n.Admitted, n.Name)
		assert.Positive(t, n.Refused, n.Name+": the hot tenant is offered 90/s against 40/s")
		assert.Zero(t, n.Failed, n.Name+": every answer an admission or a refusal")
		assert.Equal(t, "ready", n.Health, n.Name)
	}
	assert.LessOrEqual(t, float64(sum.HotWorst), 40*1.5, "no second after the burst far over the limit, the kill included")
	assert.GreaterOrEqual(t, sum.HotRate, 40*0.7)
	killed := slices.IndexFunc(sum.Events, func(e string) bool { return strings.Contains(e, "node-3 killed") })
	ready := slices.IndexFunc(sum.Events, func(e string) bool { return strings.Contains(e, "node-3 ready again") })
	assert.True(t, killed >= 0 && ready > killed, "killed, then ready again: %v", sum.Events)

	assert.Equal(t, 1, fleetMain(context.Background(), []string{"--service", "--hybridlimitd", bin, "--scenario", "changes"}, &stdout, &stderr))
}
