package rules_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
)

// TestParseExample: docs/examples/rules.yaml parses to the policies it
// describes.
func TestParseExample(t *testing.T) {
	t.Parallel()
	s, err := rules.Load("../docs/examples/rules.yaml")
	require.NoError(t, err)
	byName := map[string]hybrid.Policy{}
	for _, p := range s.Policies() {
		byName[p.Name] = p
	}
	assert.Len(t, byName, 7)
	assert.Equal(t, hybrid.Policy{Name: "per-ip", Prefix: "per-ip:", Algorithm: local.TokenBucket, Limit: 50, Window: time.Second, Burst: 100}, byName["per-ip"])
	assert.Equal(t, hybrid.Policy{Name: "api/pro", Prefix: "api/pro:", Limit: 1000, Window: time.Minute, Burst: 2000}, byName["api/pro"])
	assert.True(t, byName["search/pro"].Shadow, "tiers take their rule's fields")
	assert.Equal(t, hybrid.Policy{Name: "login", Prefix: "login:", Mode: hybrid.Strict, Algorithm: local.SlidingWindow,
		Limit: 5, Window: time.Minute, OnUnreachable: hybrid.FailClosed}, byName["login"])
}

// TestParseJSON: a JSON file is read as YAML is.
func TestParseJSON(t *testing.T) {
	t.Parallel()
	s, err := rules.Parse("rules.json", []byte(`{"rules": [{"name": "a", "key": ["ip"], "rate": 2.5, "burst": 5, "mode": "local"}]}`))
	require.NoError(t, err)
	assert.Equal(t, []hybrid.Policy{{Name: "a", Prefix: "a:", Mode: hybrid.Local, Rate: 2.5, Burst: 5}}, s.Policies())
}

// TestParseRefuses: every fault of a file is refused with the file, line
// and column, and the field, of the first one.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	rule := "rules:\n  - name: a\n    key: [ip]\n"
	tests := []struct {
		name, file, want string
	}{
		{"empty", "", "f.yaml: empty"},
		{"not yaml", "rules: [", "f.yaml: yaml:"},
		{"no rules", "defaults: {limit: 1}\n", "f.yaml:1:1: rules: missing"},
		{"rules empty", "rules: []\n", "f.yaml:1:8: rules: want a list of at least one rule"},
		{"top-level typo", rule + "    limit: 1\n    window: 1s\nrulez: []\n", `f.yaml:6:1: file: unknown field "rulez"`},
		{"field typo", rule + "    limt: 5\n    window: 1s\n", `f.yaml:4:5: rules[0] ("a"): unknown field "limt"`},
		{"no name", "rules:\n  - key: [ip]\n    limit: 1\n    window: 1s\n", "f.yaml:2:5: rules[0].name: missing"},
		{"bad name", "rules:\n  - name: a:b\n", `f.yaml:2:11: rules[0] ("a:b").name: "a:b": a name takes letters`},
		{"name twice", rule + "    limit: 1\n    window: 1s\n" + strings.TrimPrefix(rule, "rules:\n") + "    limit: 1\n    window: 1s\n",
			`f.yaml:6:5: rules[1].name: "a" is used twice`},
		{"no key", "rules:\n  - name: a\n    limit: 1\n", `f.yaml:2:5: rules[0] ("a").key: missing`},
		{"bad key part", "rules:\n  - name: a\n    key: [ip, user]\n", `f.yaml:3:15: rules[0] ("a").key: "user" is not a key part`},
		{"key part twice", "rules:\n  - name: a\n    key: [ip, ip]\n", `f.yaml:3:15: rules[0] ("a").key: "ip" is given twice`},
		{"negative limit", rule + "    limit: -5\n    window: 1s\n", `f.yaml:2:5: rules[0] ("a"): Limit is -5; it must be at least 1`},
		{"limit not a number", rule + "    limit: lots\n", `f.yaml:4:12: rules[0] ("a").limit: "lots": invalid syntax`},
		{"limit too big", rule + "    limit: 99999999999999999999\n", `rules[0] ("a").limit: "99999999999999999999": value out of range`},
		{"bad window", rule + "    limit: 1\n    window: 1 minute\n", `f.yaml:5:13: rules[0] ("a").window: "1 minute"`},
		{"bad mode", rule + "    mode: fast\n", `f.yaml:4:11: rules[0] ("a").mode: "fast"`},
		{"mode as a list", rule + "    mode: [local]\n", `f.yaml:4:11: rules[0] ("a").mode: want a single value`},
		{"load factor 0", "load_factor: 0\n" + rule, `f.yaml:1:14: load_factor: "0": want a number more than 0 and at most 1`},
		{"load factor 2", rule + "    load_factor: 2\n", `f.yaml:4:18: rules[0] ("a").load_factor: "2": want`},
		{"load factor nan", rule + "    load_factor: .nan\n", `rules[0] ("a").load_factor: ".nan": want`},
		{"shadow not a bool", rule + "    shadow: maybe\n", `f.yaml:4:13: rules[0] ("a").shadow: "maybe": invalid syntax`},
		{"rate beside limit", rule + "    rate: 5\n    limit: 5\n    burst: 5\n", `Rate is set, so Limit and Window must be zero`},
		{"window too small for hybrid", rule + "    limit: 5\n    window: 1us\n", `Window is 1µs; a hybrid policy needs at least 1ms`},
		{"star inside", rule + "    limit: 1\n    window: 1s\n    endpoints: [\"/a*/b\"]\n", `rules[0] ("a").endpoints: "/a*/b": '*' may only end`},
		{"default tier without tiers", rule + "    limit: 1\n    window: 1s\n    default_tier: free\n", `f.yaml:6:19: rules[0] ("a").default_tier: there are no tiers`},
		{"tiers without default", rule + "    tiers: {free: {limit: 1, window: 1s}}\n", `f.yaml:2:5: rules[0] ("a").default_tier: missing`},
		{"default tier unknown", rule + "    default_tier: gold\n    tiers: {free: {limit: 1, window: 1s}}\n", `rules[0] ("a").default_tier: "gold" is not one of the tiers`},
		{"tier fault", rule + "    default_tier: free\n    tiers:\n      free: {limit: 0, window: 1s}\n", `f.yaml:6:13: rules[0] ("a").tiers.free: Limit is 0`},
		{"tier typo", rule + "    default_tier: free\n    tiers:\n      free: {limit: 1, windw: 1s}\n", `f.yaml:6:24: rules[0] ("a").tiers.free: unknown field "windw"`},
		{"alias", "x: &x {limit: 1}\n" + rule, `f.yaml:1:1: file: unknown field "x"`},
		{"alias in a rule", "rules:\n  - &r {name: a, key: [ip], limit: 1, window: 1s}\n  - name: b\n    key: *r\n", `aliases are not allowed`},
		{"unknown defaults field", "defaults: {limits: 5}\n" + rule, `f.yaml:1:12: defaults: unknown field "limits"`},
		{"huge", "rules:\n" + strings.Repeat("  - {name: a, key: [ip], limit: 1, window: 1s}\n", 30000), "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := rules.Parse("f.yaml", []byte(tt.file))
			require.ErrorIs(t, err, rules.ErrInvalid)
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

// TestParseManyRules: the bound on rules is an error, not a crash, and
// rules up to it parse.
func TestParseManyRules(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 4097 {
		b.WriteString("  - {name: r")
		b.WriteString(strings.Repeat("x", i%3))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(", key: [ip], limit: 1, window: 1s}\n")
	}
	_, err := rules.Parse("f.yaml", []byte(b.String()))
	require.ErrorIs(t, err, rules.ErrInvalid)
	assert.ErrorContains(t, err, "4097 rules; at most 4096")
}
