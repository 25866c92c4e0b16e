package hybrid_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// A fleet-wide limit of 100 requests per second per API key, decided in
// memory on every node and synced through Redis every 100 ms.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := global.NewRedis(ctx, global.RedisConfig{Client: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	limiter, err := hybrid.New(hybrid.Config{
		Policies: []hybrid.Policy{
			{Name: "api", Prefix: "api:", Limit: 100, Window: time.Second},
			{Name: "login", Prefix: "login:", Algorithm: local.SlidingWindow, Limit: 5, Window: time.Minute, Mode: hybrid.Strict},
		},
		Syncer: store,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close() // hands the leases back

	d, err := limiter.Allow("api:key-42")
	switch {
	case err != nil:
		fmt.Println(err)
	case !d.Allowed():
		fmt.Printf("429: retry in %v\n", d.RetryAfter())
	}
}

// A Local policy needs no fleet at all.
func ExampleLimiter_Allow() {
	limiter, err := hybrid.New(hybrid.Config{
		Policies: []hybrid.Policy{{Name: "local", Mode: hybrid.Local, Limit: 2, Window: time.Minute}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close()
	for range 3 {
		d, _ := limiter.Allow("user:1")
		fmt.Println(d.Allowed(), d.Remaining())
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// Limits that live in the caller's own store, one per customer, are
// given per call: the policy gives the rest (its window, its algorithm,
// its mode).
func ExampleLimiter_AllowNLimit() {
	fleet, err := gossip.New(gossip.Config{BindAddr: "127.0.0.1"}) // a fleet of one
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fleet.Close()
	limiter, err := hybrid.New(hybrid.Config{
		Policies:  []hybrid.Policy{{Name: "customers", Limit: 1000, Window: time.Minute}},
		Syncer:    fleet,
		FleetSize: 1, // a new key's first burst is all of it
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close()
	perMinute := map[string]int64{"acme": 3, "globex": 100} // from the caller's database
	for range 4 {
		d, _ := limiter.AllowNLimit("acme", 1, perMinute["acme"], 0)
		fmt.Println(d.Allowed(), d.Limit())
	}
	// Output:
	// true 3
	// true 3
	// true 3
	// false 3
}

// New names the field at fault.
func ExampleNew_error() {
	_, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{{Name: "api", Limit: 100}}})
	fmt.Println(err)
	// Output:
	// hybrid: Config.Policies[0] ("api"): Window is 0s; it must be positive
}

// A node cut off from its fleet, here a gossip node whose only seed does
// not answer, keeps limiting and says so.
func ExampleLimiter_Health() {
	peers, err := gossip.New(gossip.Config{BindAddr: "127.0.0.1", Seeds: []string{"127.0.0.1:1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer peers.Close()
	limiter, err := hybrid.New(hybrid.Config{
		Node: peers.Name(), Syncer: peers, ManualSync: true,
		Policies: []hybrid.Policy{{Name: "api", Limit: 100, Window: time.Second}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close()

	d, _ := limiter.Allow("api:key-42") // a new key's starter credit
	err = limiter.SyncOnce(context.Background())
	fmt.Println(d.Allowed(), errors.Is(err, fleet.ErrUnreachable))
	h := limiter.Health()
	fmt.Println(h.Level, h.Factor)
	// Output:
	// true true
	// degraded 1
}
