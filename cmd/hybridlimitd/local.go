package main

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/rules"
)

// A node with no fleet limits alone: its policies are Local, each node
// holding the whole limit.

// localOnly is policies with every Mode Local.
func localOnly(policies []hybrid.Policy) []hybrid.Policy {
	out := make([]hybrid.Policy, len(policies))
	for i, p := range policies {
		p.Mode = hybrid.Local
		out[i] = p
	}
	return out
}

// localSet is s with every rule's and tier's mode Local.
func localSet(s *rules.Set) (*rules.Set, error) {
	doc := map[string]any{}
	if err := yaml.Unmarshal(s.Source(), &doc); err != nil {
		return nil, err
	}
	setMode := func(m any) {
		if m, ok := m.(map[string]any); ok {
			m["mode"] = "local"
		}
	}
	d, _ := doc["defaults"].(map[string]any)
	if d == nil {
		d = map[string]any{}
	}
	d["mode"] = "local"
	doc["defaults"] = d
	rs, _ := doc["rules"].([]any)
	for _, r := range rs {
		if r, ok := r.(map[string]any); ok {
			if _, has := r["mode"]; has {
				setMode(r)
			}
			tiers, _ := r["tiers"].(map[string]any)
			for _, t := range tiers {
				if t, ok := t.(map[string]any); ok {
					if _, has := t["mode"]; has {
						setMode(t)
					}
				}
			}
		}
	}
	src, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return rules.Parse(s.File()+" (local)", src)
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
