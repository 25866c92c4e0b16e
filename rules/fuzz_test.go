package rules

import (
	"os"
	"strings"
	"testing"
)

// FuzzParse: no input makes Parse panic, and what it accepts is sound:
// every policy is valid, names and prefixes are unique and no prefix
// starts another (so a key reaches its own rule's policy alone), and
// every key a rule makes starts with its policy's prefix.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("../docs/examples/rules.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example), "ten|ant", "pro", "POST /api/x")
	f.Add("rules:\n  - {name: a, key: [ip, tenant], limit: 1, window: 1s}\n", `a\`, "", "/")
	f.Add(`{"rules": [{"name": "a", "key": ["tier"], "rate": 0.5, "burst": 1}]}`, "", "x", "")
	f.Add("rules:\n  - name: a\n    key: [endpoint]\n    default_tier: t\n    tiers: {t: {limit: 1, window: 1s}}\n", "", "", "GET /a")
	f.Fuzz(func(t *testing.T, file, tenant, tier, endpoint string) {
		s, err := Parse("f.yaml", []byte(file))
		if err != nil {
			return
		}
		prefixes := map[string]string{}
		for _, p := range s.policies {
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted an invalid policy: %v", err)
			}
			if _, dup := prefixes[p.Prefix]; dup {
				t.Fatalf("two policies with prefix %q", p.Prefix)
			}
			prefixes[p.Prefix] = p.Name
		}
		for a := range prefixes {
			for b := range prefixes {
				if a != b && strings.HasPrefix(b, a) {
					t.Fatalf("prefix %q starts %q", a, b)
				}
			}
		}
		req := Request{Tenant: tenant, Tier: tier, Endpoint: endpoint, IP: tenant + tier}
		for _, r := range s.rules {
			key, policy, ok := r.keyOf(&req)
			if !ok {
				continue
			}
			found := false
			for prefix, name := range prefixes {
				if name == policy {
					found = strings.HasPrefix(key, prefix)
				}
			}
			if !found {
				t.Fatalf("rule %q made key %q outside its policy %q", r.name, key, policy)
			}
		}
	})
}
