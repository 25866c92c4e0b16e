package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/sim"
)

// TestSimCommands runs the simulator's three commands as a user would and
// checks what they print and write.
func TestSimCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := simMain(args, &out, &errOut)
		return out.String(), errOut.String(), code
	}

	out, _, code := run("--scenario", "skewed", "--nodes", "3", "--sync", "50ms", "--duration", "5s", "--json")
	require.Equal(t, 0, code)
	var r sim.Result
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, "skewed", r.Scenario)
	assert.Equal(t, 3, r.Nodes)
	assert.Positive(t, r.Admitted)

	out, _, code = run("--duration", "5s")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "false rejection")

	md, svg := filepath.Join(dir, "t.md"), filepath.Join(dir, "t.svg")
	out, _, code = run("sweep", "--nodes", "2,4", "--shares", "demandweighted,equal", "--intervals", "50ms,200ms", "--duration", "5s", "--md", md, "--svg", svg)
	require.Equal(t, 0, code)
	assert.Equal(t, 2+2*2*2, strings.Count(out, "\n"), "a header, a rule and a row per run")
	written, err := os.ReadFile(md)
	require.NoError(t, err)
	assert.Equal(t, out, string(written))
	plot, err := os.ReadFile(svg)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(plot, new(struct{ XMLName xml.Name })), "the plot is well-formed XML")
	assert.Equal(t, 2*2*2, strings.Count(string(plot), "<polyline"), "two lines per series")

	out, _, code = run("tune", "--overshoot", "50", "--false-rejection", "50", "--intervals", "50ms,200ms", "--duration", "5s")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "Sync every 200ms")

	_, errOut, code := run("tune", "--overshoot", "0", "--false-rejection", "0", "--intervals", "1s", "--duration", "5s")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no interval meets")

	_, errOut, code = run("--scenario", "nope")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "Config.Scenario")
	_, _, code = run("bogus")
	assert.Equal(t, 2, code)
}

// TestSimFlagsTakeNames checks that -algorithm and -shares read the
// enums' text forms, in any case, and refuse the rest with the names
// they take.
func TestSimFlagsTakeNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--algorithm", "Sliding_Window", "--duration", "1s"}, 0, ""},
		{[]string{"--algorithm", "gcra", "--shares", "EQUAL", "--duration", "1s"}, 0, ""},
		{[]string{"--algorithm", "fixedwindow"}, 1, "the simulator has tokenbucket and slidingwindow"},
		{[]string{"--algorithm", "leaky"}, 2, `local: Algorithm "leaky" is not one of`},
		{[]string{"--shares", "demandweighted,fair"}, 1, `fleet: Shares "fair" is not one of demandweighted, equal`},
	} {
		var out, errOut bytes.Buffer
		code := simMain(tc.args, &out, &errOut)
		assert.Equal(t, tc.code, code, "%v: %s", tc.args, errOut.String())
		assert.Contains(t, errOut.String(), tc.err, "%v", tc.args)
	}
}
