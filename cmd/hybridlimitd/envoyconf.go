package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.yaml.in/yaml/v3"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// An envoyproxy/ratelimit configuration, read as that service reads it:
// a domain, and a tree of descriptors, each a key with an optional value
// (a value ending in '*' matches any value it starts), an optional
// rate_limit, and nested descriptors. Each rate_limit becomes a
// hybrid.Policy named by its path ("domain.key_value.key"): a token
// bucket of requests_per_unit a unit holding requests_per_unit, Hybrid
// (Local with no fleet), Shadow for shadow_mode. envoyproxy/ratelimit
// counts fixed windows; both admit requests_per_unit at once from a
// fresh start and at most twice it in any span of a unit. (A sliding
// window, stricter, refused 1.9% of the requests of tenants far under
// their limits in BenchmarkRLS, where the token bucket refused none:
// issue 20's gap for Hybrid sliding windows.)

type envoyFile struct {
	Domain      string            `yaml:"domain"`
	Descriptors []envoyDescriptor `yaml:"descriptors"`
}

type envoyDescriptor struct {
	Key            string            `yaml:"key"`
	Value          string            `yaml:"value"`
	RateLimit      *envoyLimit       `yaml:"rate_limit"`
	Descriptors    []envoyDescriptor `yaml:"descriptors"`
	ShadowMode     bool              `yaml:"shadow_mode"`
	DetailedMetric bool              `yaml:"detailed_metric"` // accepted; the metrics are by policy
}

type envoyLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// units are the envoy units and how long each is.
var units = map[rlspb.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlspb.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlspb.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlspb.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlspb.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlspb.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// node is one level of a domain's descriptor tree.
type node struct {
	children  map[string]*node // by "key_value", or "key" for any value
	wildcards []string         // children's keys ending in '*', in order
	limit     *limit
}

// limit is a descriptor's rate_limit.
type limit struct {
	policy    string // the hybrid policy's name: the descriptor's path
	prefix    string // its Prefix, which starts every key it decides
	rpu       uint32
	unit      rlspb.RateLimitResponse_RateLimit_Unit
	unlimited bool
	shadow    bool // shadow_mode: decided and counted, always OK
	name      string
	replaces  []string
}

// envoyConfig is every domain of the configuration files read.
type envoyConfig struct {
	domains  map[string]*node
	policies []hybrid.Policy
	shadow   bool // every limit in shadow mode (envoyproxy/ratelimit's SHADOW_MODE)
	merge    bool // a domain in several files is one (MERGE_DOMAIN_CONFIG)
}

// loadEnvoy reads the envoyproxy/ratelimit configuration at each path: a
// YAML file, or a directory of them (*.yaml, *.yml).
func loadEnvoy(paths []string, shadow, merge bool) (*envoyConfig, error) {
	c := &envoyConfig{domains: map[string]*node{}, shadow: shadow, merge: merge}
	for _, p := range paths {
		files := []string{p}
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			files = nil
			for _, pat := range []string{"*.yaml", "*.yml"} {
				m, _ := filepath.Glob(filepath.Join(p, pat))
				files = append(files, m...)
			}
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("envoy config: %w", err)
			}
			if err := c.add(f, data); err != nil {
				return nil, err
			}
		}
	}
	if len(c.domains) == 0 {
		return nil, errors.New("envoy config: no domain found in " + strings.Join(paths, ", "))
	}
	// A descriptor's limit override (rls.go) is decided under a template
	// policy of its unit, which the override's own limit replaces key by
	// key (hybrid.Limiter.AllowNLimit).
	for u := typepb.RateLimitUnit_SECOND; u <= typepb.RateLimitUnit_YEAR; u++ {
		c.policies = append(c.policies, hybrid.Policy{Name: "envoy:override:" + strings.ToLower(u.String()), Prefix: overridePrefix(u),
			Algorithm: local.TokenBucket, Limit: 1, Window: units[rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[u.String()])]})
	}
	return c, nil
}

// overridePrefix starts the keys of limit overrides of unit u: '%' and
// 'o' after "%rls" start no configured limit's prefix.
func overridePrefix(u typepb.RateLimitUnit) string { return fmt.Sprintf("%%rlso%d:", u) }

// add parses one file, named name, into c.
func (c *envoyConfig) add(name string, data []byte) error {
	if len(data) > 1<<20 {
		return fmt.Errorf("envoy config: %s is larger than 1 MiB", name)
	}
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(true) // a misspelt field is an error, as envoyproxy/ratelimit makes it
	var f envoyFile
	if err := d.Decode(&f); err != nil {
		return fmt.Errorf("envoy config: %s: %w", name, err)
	}
	if f.Domain == "" {
		return fmt.Errorf("envoy config: %s: the domain is empty", name)
	}
	root := c.domains[f.Domain]
	switch {
	case root != nil && !c.merge:
		return fmt.Errorf("envoy config: %s: domain %q is given twice (--merge-domains merges them)", name, f.Domain)
	case root == nil:
		root = &node{children: map[string]*node{}}
	}
	if err := c.load(name, root, f.Domain+".", f.Descriptors); err != nil {
		return err
	}
	c.domains[f.Domain] = root
	return nil
}

// load adds descriptors under n, whose path is parent.
func (c *envoyConfig) load(file string, n *node, parent string, ds []envoyDescriptor) error {
	for _, d := range ds {
		if d.Key == "" {
			return fmt.Errorf("envoy config: %s: %s: a descriptor has an empty key", file, parent)
		}
		k := d.Key
		if d.Value != "" {
			k += "_" + d.Value
		}
		path := parent + k
		if _, dup := n.children[k]; dup {
			return fmt.Errorf("envoy config: %s: descriptor %q is given twice", file, path)
		}
		child := &node{children: map[string]*node{}}
		if r := d.RateLimit; r != nil {
			l, err := c.limitOf(file, path, r, d.ShadowMode || c.shadow)
			if err != nil {
				return err
			}
			child.limit = l
		}
		if err := c.load(file, child, path+".", d.Descriptors); err != nil {
			return err
		}
		n.children[k] = child
		if strings.HasSuffix(k, "*") {
			n.wildcards = append(n.wildcards, k)
		}
	}
	return nil
}

// limitOf checks r, the rate_limit at path, and makes its policy.
func (c *envoyConfig) limitOf(file, path string, r *envoyLimit, shadow bool) (*limit, error) {
	unit := rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(r.Unit)])
	window, known := units[unit]
	switch {
	case r.Unlimited && r.Unit != "":
		return nil, fmt.Errorf("envoy config: %s: %s: an unlimited rate_limit takes no unit", file, path)
	case !r.Unlimited && !known:
		return nil, fmt.Errorf("envoy config: %s: %s: unit %q is not second, minute, hour, day, week, month or year", file, path, r.Unit)
	}
	l := &limit{policy: path, rpu: r.RequestsPerUnit, unit: unit, unlimited: r.Unlimited, shadow: shadow, name: r.Name}
	for _, x := range r.Replaces {
		if x.Name == "" || x.Name == r.Name {
			return nil, fmt.Errorf("envoy config: %s: %s: a replaces entry is empty or names its own rate_limit", file, path)
		}
		l.replaces = append(l.replaces, x.Name)
	}
	if !l.unlimited && l.rpu > 0 {
		// '%' is in no rule's name nor ':' in a rules policy's name
		// (package rules), so a rules file beside the configuration, or
		// the rules API, reaches neither these prefixes nor these names;
		// and prefixes of digits and ':' never start one another.
		l.prefix = fmt.Sprintf("%%rls%d:", len(c.policies))
		c.policies = append(c.policies, hybrid.Policy{Name: "envoy:" + path, Prefix: l.prefix, Algorithm: local.TokenBucket,
			Limit: int64(l.rpu), Window: window, Shadow: shadow})
	}
	return l, nil
}

// find is the limit that applies to entries in domain's tree, as
// envoyproxy/ratelimit finds it: at each level the child "key_value",
// else the first wildcard the value matches, else "key"; the limit is
// that of the node reached by the last entry, if the tree goes that
// deep. nil if none applies.
func (root *node) find(entries []entry) *limit {
	n := root
	var found *limit
	for i, e := range entries {
		kv := e.key + "_" + e.value
		next := n.children[kv]
		if next == nil {
			for _, w := range n.wildcards {
				if strings.HasPrefix(kv, strings.TrimSuffix(w, "*")) {
					next = n.children[w]
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.key]
		}
		if next == nil {
			return found
		}
		if next.limit != nil && i == len(entries)-1 {
			found = next.limit
		}
		n = next
	}
	return found
}

// entry is a descriptor entry.
type entry struct{ key, value string }
