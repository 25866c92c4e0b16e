package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// Request is what a rule reads of a request: the parts keys are made of
// and the endpoint rules are chosen by. An empty part leaves out every
// rule whose key needs it, so a request without a tenant is limited by
// the rules that do not name one.
type Request struct {
	// Tenant is who is calling: an API key, an account, a user.
	Tenant string
	// Tier picks the limit of a rule with tiers; a tier the rule does not
	// list, or none, takes its default_tier.
	Tier string
	// Endpoint is what the caller does: a path, or a method and a path
	// ("POST /login"), as net/http's patterns name them. A rule with
	// endpoints applies to the requests whose Endpoint one matches: a
	// pattern that starts with '/' matches the path whatever the method,
	// and a '*' at its end matches any rest.
	Endpoint string
	// IP is the client's address (see httplimit.IP for reading it
	// safely from behind proxies).
	IP string
}

// part is one part of a key.
type part int

const (
	tenantPart part = iota
	tierPart
	endpointPart
	ipPart
)

var partNames = [...]string{"tenant", "tier", "endpoint", "ip"}

func partOf(s string) (part, bool) {
	for i, n := range partNames {
		if n == s {
			return part(i), true
		}
	}
	return 0, false
}

// of is part q of r.
func (q part) of(r *Request) string {
	switch q {
	case tenantPart:
		return r.Tenant
	case tierPart:
		return r.Tier
	case endpointPart:
		return r.Endpoint
	}
	return r.IP
}

// rule is one rule of a Set.
type rule struct {
	name        string
	key         []part
	endpoints   []string          // patterns; none: every endpoint
	tiers       map[string]string // tier -> its policy's prefix; nil if the rule has no tiers
	defaultTier string
	policies    []hybrid.Policy // the rule's, or one per tier
	factor      float64         // its load factor (hybrid.Limiter.SetLoadFactor)
	last        bool            // decided after the others: its decisions cannot all be given back
}

// Set is a parsed rules file: the policies it defines and how a request
// maps to their keys. A Set does not change once made; it is safe for
// concurrent use.
type Set struct {
	file     string
	src      []byte   // the file's bytes
	sum      [32]byte // of the file's bytes, to tell a changed file
	rules    []*rule  // those that give back a refusal's tokens first
	policies []hybrid.Policy
	factors  map[string]float64 // load factor by policy name
}

// add appends r, keeping the rules whose decisions can be given back
// (Hybrid, and Local token buckets) before the others: a refusal by a
// later rule then leaves nothing taken by an earlier one.
func (s *Set) add(r *rule) {
	for _, p := range r.policies {
		if p.Mode == hybrid.Strict || p.Mode == hybrid.Local && p.Algorithm != local.TokenBucket {
			r.last = true
		}
	}
	s.policies = append(s.policies, r.policies...)
	for _, p := range r.policies {
		if s.factors == nil {
			s.factors = map[string]float64{}
		}
		s.factors[p.Name] = r.factor
	}
	if r.last {
		s.rules = append(s.rules, r)
		return
	}
	i := 0
	for i < len(s.rules) && !s.rules[i].last {
		i++
	}
	s.rules = append(s.rules[:i], append([]*rule{r}, s.rules[i:]...)...)
}

// Policies returns the hybrid policies the Set defines, one per rule
// without tiers and one per tier, for hybrid.Config.Policies or
// hybrid.Limiter.SetPolicies.
func (s *Set) Policies() []hybrid.Policy { return append([]hybrid.Policy(nil), s.policies...) }

// File returns the name the Set was parsed from.
func (s *Set) File() string { return s.file }

// Source returns the bytes the Set was parsed from.
func (s *Set) Source() []byte { return append([]byte(nil), s.src...) }

// applies reports whether r applies to endpoint. As in net/http's
// patterns, an endpoint may start with a method ("POST /login"): a
// pattern that starts with '/' matches its path whatever the method, and
// one with a method matches the whole. A pattern ending in '*' matches
// what starts with the rest.
func (r *rule) applies(endpoint string) bool {
	if len(r.endpoints) == 0 {
		return true
	}
	path := endpoint
	if i := strings.IndexByte(endpoint, ' '); i >= 0 && !strings.HasPrefix(endpoint, "/") {
		path = endpoint[i+1:]
	}
	for _, e := range r.endpoints {
		against := endpoint
		if strings.HasPrefix(e, "/") {
			against = path
		}
		if p, ok := strings.CutSuffix(e, "*"); ok {
			if strings.HasPrefix(against, p) {
				return true
			}
		} else if e == against {
			return true
		}
	}
	return false
}

// keyOf is r's key for req, and the name of the policy it falls under;
// false if r does not apply to req or a part its key needs is empty.
// Parts are joined by '|', and a '|', '#' or '\' within a part is
// escaped with '\', so that no two requests' parts make one key. A key
// whose parts are longer than maxParts is the prefix, '#' and their
// SHA-256, so that a client padding a header is limited like any other
// rather than refused as an error (a gateway may let an error through).
// A tiered rule's key takes the tier it resolved to, so that a request
// naming a tier the rule does not list cannot start a bucket of its own.
func (r *rule) keyOf(req *Request) (key, policy string, ok bool) {
	if !r.applies(req.Endpoint) {
		return "", "", false
	}
	prefix, policy, tier := r.name+":", r.name, req.Tier
	if r.tiers != nil {
		if _, known := r.tiers[tier]; !known {
			tier = r.defaultTier
		}
		prefix, policy = r.tiers[tier], r.name+"/"+tier
	}
	var b strings.Builder
	for i, q := range r.key {
		v := q.of(req)
		if q == tierPart {
			v = tier
		}
		if v == "" {
			return "", "", false
		}
		if i > 0 {
			b.WriteByte('|')
		}
		if !strings.ContainsAny(v, `|\#`) {
			b.WriteString(v)
			continue
		}
		for j := 0; j < len(v); j++ {
			if v[j] == '|' || v[j] == '\\' || v[j] == '#' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[j])
		}
	}
	if b.Len() > maxParts {
		sum := sha256.Sum256([]byte(b.String()))
		return prefix + "#" + hex.EncodeToString(sum[:]), policy, true
	}
	return prefix + b.String(), policy, true
}

// maxParts is the longest a key's parts are kept as they are: with a
// rule's prefix, under hybrid's default MaxKeyLen (256).
const maxParts = 160
