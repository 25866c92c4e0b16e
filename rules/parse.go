package rules

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// ErrInvalid is wrapped by every error for a rules file that cannot be
// used; the error says which file, line and field, and why.
var ErrInvalid = errors.New("rules: invalid rules file")

// Bounds on what a rules file may hold, so that a file written by
// mistake (or by someone hostile) cannot take the node's memory.
const (
	maxFileSize = 256 << 10 // a 1 MiB flow list took 126 MiB to parse
	maxRules    = 4096
	maxTiers    = 64
	maxNameLen  = 64
	maxPattern  = 256
)

// Load reads and parses the rules file at path. See Parse.
func Load(path string) (*Set, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readFile reads at most maxFileSize bytes of path, and refuses more.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("rules: %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, path, maxFileSize)
	}
	return data, nil
}

// Parse parses data, a rules file in YAML (or JSON, which YAML reads), as
// read from name, which errors quote. It checks every rule as New and
// SetPolicies would (hybrid.Policy.Validate), and refuses fields it does
// not know, so that a misspelt field is an error, not a default. An error
// wraps ErrInvalid and reads "name:line:column: field: what is wrong".
func Parse(name string, data []byte) (*Set, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, name, maxFileSize)
	}
	p := &parser{file: name}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	s, err := p.document(&doc)
	if err != nil {
		return nil, err
	}
	s.sum, s.src = sha256.Sum256(data), append([]byte(nil), data...)
	return s, nil
}

// parser walks a rules file's nodes, naming positions in its errors.
type parser struct{ file string }

// fault is an error at node n, in field.
func (p *parser) fault(n *yaml.Node, field, format string, args ...any) error {
	return fmt.Errorf("%w: %s:%d:%d: %s: %s", ErrInvalid, p.file, n.Line, n.Column, field, fmt.Sprintf(format, args...))
}

// fields returns mapping n's values by key, refusing keys not in known,
// keys given twice, and aliases (a file has no use for them, and they
// can make a small file expand).
func (p *parser) fields(n *yaml.Node, field string, known ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.fault(n, field, "want a mapping of %s", strings.Join(known, ", "))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, p.fault(k, field, "a key must be a name")
		}
		if v.Kind == yaml.AliasNode || k.Kind == yaml.AliasNode {
			return nil, p.fault(v, field+"."+k.Value, "aliases are not allowed")
		}
		if !slices.Contains(known, k.Value) {
			return nil, p.fault(k, field, "unknown field %q; known: %s", clip(k.Value), strings.Join(known, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.fault(k, field, "%q is given twice", k.Value)
		}
		out[k.Value] = v
	}
	return out, nil
}

// clip quotes at most 64 bytes of s in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// limitFields are the fields of a limit: in defaults, a rule or a tier.
var limitFields = []string{"mode", "algorithm", "limit", "window", "rate", "burst", "on_unreachable", "shadow"}

// document parses the file.
func (p *parser) document(doc *yaml.Node) (*Set, error) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("%w: %s: empty; want a mapping with rules", ErrInvalid, p.file)
	}
	top, err := p.fields(doc.Content[0], "file", "defaults", "rules", "load_factor")
	if err != nil {
		return nil, err
	}
	factor := 1.0
	if v, ok := top["load_factor"]; ok {
		if factor, err = p.factor(v, "load_factor"); err != nil {
			return nil, err
		}
	}
	var defaults hybrid.Policy
	if d, ok := top["defaults"]; ok {
		f, err := p.fields(d, "defaults", limitFields...)
		if err != nil {
			return nil, err
		}
		if defaults, err = p.limit(f, "defaults", defaults); err != nil {
			return nil, err
		}
	}
	rs, ok := top["rules"]
	if !ok {
		return nil, p.fault(doc.Content[0], "rules", "missing; give at least one rule")
	}
	if rs.Kind != yaml.SequenceNode || len(rs.Content) == 0 {
		return nil, p.fault(rs, "rules", "want a list of at least one rule")
	}
	if len(rs.Content) > maxRules {
		return nil, p.fault(rs, "rules", "%d rules; at most %d", len(rs.Content), maxRules)
	}
	s := &Set{file: p.file}
	seen := map[string]bool{}
	for i, n := range rs.Content {
		r, err := p.rule(n, fmt.Sprintf("rules[%d]", i), defaults, factor)
		if err != nil {
			return nil, err
		}
		if seen[r.name] {
			return nil, p.fault(n, fmt.Sprintf("rules[%d].name", i), "%q is used twice", r.name)
		}
		seen[r.name] = true
		s.add(r)
	}
	return s, nil
}

// rule parses one rule, its limits over defaults.
func (p *parser) rule(n *yaml.Node, field string, defaults hybrid.Policy, factor float64) (*rule, error) {
	if n.Kind == yaml.MappingNode {
		// Named in every error, if it has a name at all.
		for i := 0; i+1 < len(n.Content); i += 2 {
			if v := n.Content[i+1]; n.Content[i].Value == "name" && v.Kind == yaml.ScalarNode && v.Value != "" {
				field = fmt.Sprintf("%s (%q)", field, clip(v.Value))
				break
			}
		}
	}
	f, err := p.fields(n, field, append([]string{"name", "key", "endpoints", "tiers", "default_tier", "load_factor"}, limitFields...)...)
	if err != nil {
		return nil, err
	}
	r := &rule{factor: factor}
	if v, ok := f["load_factor"]; ok {
		if r.factor, err = p.factor(v, field+".load_factor"); err != nil {
			return nil, err
		}
	}
	if r.name, err = p.name(f["name"], n, field+".name"); err != nil {
		return nil, err
	}
	if r.key, err = p.key(f["key"], n, field+".key"); err != nil {
		return nil, err
	}
	if e, ok := f["endpoints"]; ok {
		if r.endpoints, err = p.patterns(e, field+".endpoints"); err != nil {
			return nil, err
		}
	}
	base, err := p.limit(f, field, defaults)
	if err != nil {
		return nil, err
	}
	t, tiered := f["tiers"]
	dt, hasDefault := f["default_tier"]
	if !tiered {
		if hasDefault {
			return nil, p.fault(dt, field+".default_tier", "there are no tiers")
		}
		base.Name, base.Prefix = r.name, r.name+":"
		if err := p.policy(n, field, base); err != nil {
			return nil, err
		}
		r.policies = []hybrid.Policy{base}
		return r, nil
	}
	return r, p.tiers(r, t, dt, n, field, base)
}

// tiers parses a rule's tiers, each a limit over the rule's (base), and
// its default tier.
func (p *parser) tiers(r *rule, t, dt, n *yaml.Node, field string, base hybrid.Policy) error {
	if t.Kind != yaml.MappingNode || len(t.Content) == 0 {
		return p.fault(t, field+".tiers", "want a mapping of tier names to limits")
	}
	if len(t.Content)/2 > maxTiers {
		return p.fault(t, field+".tiers", "%d tiers; at most %d", len(t.Content)/2, maxTiers)
	}
	if dt == nil {
		return p.fault(n, field+".default_tier", "missing: name the tier a request of no known tier takes")
	}
	r.tiers = map[string]string{}
	for i := 0; i+1 < len(t.Content); i += 2 {
		k, v := t.Content[i], t.Content[i+1]
		tf := field + ".tiers"
		tier, err := p.name(k, k, tf)
		if err != nil {
			return err
		}
		tf += "." + tier
		if _, dup := r.tiers[tier]; dup {
			return p.fault(k, tf, "given twice")
		}
		f, err := p.fields(v, tf, limitFields...)
		if err != nil {
			return err
		}
		pol, err := p.limit(f, tf, base)
		if err != nil {
			return err
		}
		pol.Name = r.name + "/" + tier
		pol.Prefix = pol.Name + ":"
		if err := p.policy(v, tf, pol); err != nil {
			return err
		}
		r.tiers[tier] = pol.Prefix
		r.policies = append(r.policies, pol)
	}
	def, err := p.name(dt, dt, field+".default_tier")
	if err != nil {
		return err
	}
	if _, ok := r.tiers[def]; !ok {
		return p.fault(dt, field+".default_tier", "%q is not one of the tiers", def)
	}
	r.defaultTier = def
	return nil
}

// policy checks pol as hybrid would, the fault at n.
func (p *parser) policy(n *yaml.Node, field string, pol hybrid.Policy) error {
	if err := pol.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("hybrid: Policy (%q): ", pol.Name))
		return p.fault(n, field, "%s", msg)
	}
	return nil
}

// factor parses a load factor: more than 0, at most 1.
func (p *parser) factor(v *yaml.Node, field string) (float64, error) {
	f, err := strconv.ParseFloat(v.Value, 64)
	if v.Kind != yaml.ScalarNode || err != nil || !(f > 0 && f <= 1) {
		return 0, p.fault(v, field, "%q: want a number more than 0 and at most 1", clip(v.Value))
	}
	return f, nil
}

// name parses a rule's or tier's name: 1 to 64 letters, digits, '_', '.'
// or '-', so that prefixes ("name:", "name/tier:") never overlap.
func (p *parser) name(v, parent *yaml.Node, field string) (string, error) {
	if v == nil {
		return "", p.fault(parent, field, "missing")
	}
	if v.Kind != yaml.ScalarNode || v.Value == "" || len(v.Value) > maxNameLen {
		return "", p.fault(v, field, "want a name of 1 to %d characters", maxNameLen)
	}
	for _, c := range v.Value {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return "", p.fault(v, field, "%q: a name takes letters, digits, '_', '.' and '-' only", clip(v.Value))
		}
	}
	return v.Value, nil
}

// key parses a rule's key parts.
func (p *parser) key(v, parent *yaml.Node, field string) ([]part, error) {
	if v == nil {
		return nil, p.fault(parent, field, "missing: list the parts a key is made of (%s)", strings.Join(partNames[:], ", "))
	}
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 || len(v.Content) > len(partNames) {
		return nil, p.fault(v, field, "want a list of 1 to %d of %s", len(partNames), strings.Join(partNames[:], ", "))
	}
	var out []part
	for _, e := range v.Content {
		q, ok := partOf(e.Value)
		if e.Kind != yaml.ScalarNode || !ok {
			return nil, p.fault(e, field, "%q is not a key part; want %s", clip(e.Value), strings.Join(partNames[:], ", "))
		}
		for _, had := range out {
			if had == q {
				return nil, p.fault(e, field, "%q is given twice", e.Value)
			}
		}
		out = append(out, q)
	}
	return out, nil
}

// patterns parses a rule's endpoints.
func (p *parser) patterns(v *yaml.Node, field string) ([]string, error) {
	if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
		return nil, p.fault(v, field, "want a list of endpoints (an exact name, or a prefix ending in '*')")
	}
	var out []string
	for _, e := range v.Content {
		if e.Kind != yaml.ScalarNode || e.Value == "" || len(e.Value) > maxPattern {
			return nil, p.fault(e, field, "want an endpoint of 1 to %d bytes", maxPattern)
		}
		if i := strings.IndexByte(e.Value, '*'); i >= 0 && i != len(e.Value)-1 {
			return nil, p.fault(e, field, "%q: '*' may only end an endpoint", clip(e.Value))
		}
		out = append(out, e.Value)
	}
	return out, nil
}

// limit parses the limit fields of f over base.
func (p *parser) limit(f map[string]*yaml.Node, field string, base hybrid.Policy) (hybrid.Policy, error) {
	pol := base
	for _, name := range limitFields {
		v, ok := f[name]
		if !ok {
			continue
		}
		at := field + "." + name
		if v.Kind != yaml.ScalarNode {
			return pol, p.fault(v, at, "want a single value")
		}
		var err error
		switch name {
		case "mode":
			err = pol.Mode.UnmarshalText([]byte(v.Value))
		case "algorithm":
			err = pol.Algorithm.UnmarshalText([]byte(v.Value))
		case "on_unreachable":
			err = pol.OnUnreachable.UnmarshalText([]byte(v.Value))
		case "limit":
			pol.Limit, err = strconv.ParseInt(v.Value, 10, 64)
		case "burst":
			pol.Burst, err = strconv.ParseInt(v.Value, 10, 64)
		case "rate":
			pol.Rate, err = strconv.ParseFloat(v.Value, 64)
		case "window":
			pol.Window, err = time.ParseDuration(v.Value)
		case "shadow":
			pol.Shadow, err = strconv.ParseBool(v.Value)
		}
		if err != nil {
			return pol, p.fault(v, at, "%q: %v", clip(v.Value), unwrapNum(err))
		}
	}
	if _, ok := f["rate"]; ok {
		// Rate replaces a Limit and Window the rule inherits, unless it
		// sets them itself (which Validate refuses).
		_, l := f["limit"]
		_, w := f["window"]
		if !l {
			pol.Limit = 0
		}
		if !w {
			pol.Window = 0
		}
	} else if _, l := f["limit"]; l {
		pol.Rate = 0
	}
	return pol, nil
}

// unwrapNum drops strconv's quoting of the whole input, which the error
// already shows.
func unwrapNum(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}
