package layers

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/hybridlimit/hybridlimit/"

// goList runs go list with args in the module's root and returns its
// lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...) // the toolchain that runs the test is on PATH
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestGossipOnlyLinksNoRedis checks that a program built on hybrid and
// gossip alone links no Redis client: the fleet contract lives in
// package fleet, not beside the Redis implementation in global, and
// hybrid names no backend.
func TestGossipOnlyLinksNoRedis(t *testing.T) {
	t.Parallel()
	deps := goList(t, "-deps", "./hybrid", "./gossip", "./httplimit")
	require.Contains(t, deps, module+"fleet")
	for _, d := range deps {
		assert.NotContains(t, d, "go-redis", "a gossip-only program links %s", d)
		assert.NotEqual(t, module+"global", d, "a gossip-only program links the Redis fleet")
		assert.NotContains(t, d, "yaml", "a program without rules files links %s", d)
		assert.NotContains(t, d, "opentelemetry", "a program that does not trace links %s", d)
	}
}

// TestArrowsPointDown checks every package's imports (tests aside)
// against the layering: which of the module's packages each may import,
// and that only tests, harnesses and commands import the harnesses of
// internal/testkit.
func TestArrowsPointDown(t *testing.T) {
	t.Parallel()
	helpers := []string{"internal/cfgerr", "internal/clock", "internal/decision", "internal/enumtext", "internal/keytable", "internal/manual", "internal/proc", "internal/redisslot", "internal/sketch"}
	allowed := map[string][]string{
		"local":                 {"internal/clock", "internal/cfgerr", "internal/decision", "internal/enumtext", "internal/sketch"},
		"partition":             {"internal/cfgerr", "internal/enumtext"},
		"fleet":                 {"local", "partition", "internal/enumtext", "internal/redisslot"},
		"global":                {"fleet", "local", "partition", "internal/store", "internal/cfgerr", "internal/redisslot"},
		"gossip":                {"fleet", "local", "partition", "internal/cfgerr", "internal/clock", "internal/gossipsim", "internal/store"},
		"hybrid":                {"fleet", "local", "partition", "internal/cfgerr", "internal/clock", "internal/keytable", "internal/proc", "internal/sketch", "internal/store", "internal/manual", "internal/decision", "internal/breaker", "internal/enumtext"},
		"httplimit":             {"hybrid", "fleet", "local", "partition", "internal/cfgerr", "internal/enumtext"},
		"metrics":               {"hybrid", "fleet", "partition"},
		"metrics/gossipmetrics": {"gossip"},
		"rules":                 {"hybrid", "local"},
		"admin":                 {"rules", "hybrid", "local"},
		"loadfactor":            {"hybrid"},
	}
	for _, h := range helpers {
		allowed[h] = nil // production helpers import nothing of the module
	}
	allowed["internal/store"] = []string{"fleet"}                          // the store protocol, beside the contract
	allowed["internal/breaker"] = []string{"partition", "internal/cfgerr"} // the machine behind partition.BreakerConfig
	allowed["internal/gossipsim"] = []string{"fleet"}                      // the simulator's hooks on gossip's core
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		may, checked := allowed[pkg]
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			if !strings.HasPrefix(pkg, "internal/testkit/") && !strings.HasPrefix(pkg, "cmd/") { // the demo cuts its network with faultnet
				assert.False(t, strings.HasPrefix(imp, "internal/testkit/"), "%s imports the test harness %s", pkg, imp)
			}
			if !strings.HasPrefix(pkg, "cmd/") { // the demo runs the simulator
				assert.NotEqual(t, "sim", imp, "%s imports the simulator", pkg)
			}
			assert.False(t, strings.HasPrefix(imp, "cmd/"), "%s imports a command", pkg)
			if checked {
				assert.Contains(t, may, imp, "%s imports %s, which the layering does not let it", pkg, imp)
			}
		}
	}
}
