package rules_test

import (
	"fmt"
	"log"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/rules"
)

func Example() {
	// Usually rules.Load("rules.yaml"), and a fleet: see docs/policies.md.
	set, err := rules.Parse("rules.yaml", []byte(`
defaults: {mode: local, window: 1m}
rules:
  - name: per-ip
    key: [ip]
    limit: 3
  - name: api
    key: [tenant]
    default_tier: free
    tiers:
      free: {limit: 2}
      pro:  {limit: 100}
`))
	if err != nil {
		log.Fatal(err) // names the file, line and field at fault
	}
	limiter, err := hybrid.New(hybrid.Config{Policies: set.Policies()})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	r, err := rules.New(limiter, set)
	if err != nil {
		log.Fatal(err)
	}
	for _, req := range []rules.Request{
		{Tenant: "acme", IP: "192.0.2.1"},
		{Tenant: "acme", IP: "192.0.2.2"},
		{Tenant: "acme", IP: "192.0.2.3"},                 // acme's free tier is spent
		{Tenant: "initech", Tier: "pro", IP: "192.0.2.1"}, // 192.0.2.1's second
		{Tenant: "initech", Tier: "pro", IP: "192.0.2.1"}, // and third
		{Tenant: "initech", Tier: "pro", IP: "192.0.2.1"}, // its address is spent
	} {
		v, err := r.Allow(req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(req.Tenant, req.IP, v.Allowed(), v.Policy)
	}
	// Output:
	// acme 192.0.2.1 true api/free
	// acme 192.0.2.2 true api/free
	// acme 192.0.2.3 false api/free
	// initech 192.0.2.1 true per-ip
	// initech 192.0.2.1 true per-ip
	// initech 192.0.2.1 false per-ip
}
