// Package rules reads limits from a rules file (YAML, or JSON) and
// decides requests against every rule that applies to them, all or
// nothing, with a hybrid.Limiter.
//
// A rule names the request's parts its key is made of (tenant, tier,
// endpoint, IP), the endpoints it applies to, and its limit, or one limit
// per tier:
//
//	defaults:
//	  algorithm: gcra
//	rules:
//	  - name: per-ip
//	    key: [ip]
//	    limit: 50
//	    window: 1s
//	  - name: api
//	    key: [tenant]
//	    endpoints: ["/api/*"]
//	    default_tier: free
//	    tiers:
//	      free: {limit: 100, window: 1m}
//	      pro:  {limit: 1000, window: 1m, burst: 2000}
//
// Each rule, or each tier of a rule, is a hybrid.Policy named "rule" or
// "rule/tier" whose Prefix ("rule:" or "rule/tier:") starts every key the
// rule makes, so no two rules share a key. Parse and Load check a file
// whole and name the file, line and field of the first fault; Limiter
// applies a Set to a hybrid.Limiter (SetPolicies) and decides requests
// against it; Watch reloads the file when it changes, keeping the rules
// in force when the new file is refused. docs/policies.md describes the
// file field by field.
package rules
