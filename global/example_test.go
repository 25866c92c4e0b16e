package global_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/local"
)

// A node's sync: report what it spent since the last one and what it
// expects to need, and learn what it may spend next. (Needs a Redis on
// localhost:6379, so it is compiled but not run.)
func ExampleRedis_Sync() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // so a dead Redis fails within the Syncer's timeout
	})
	defer client.Close()
	// NewRedis checks its config and does not wait for Redis: a node
	// starts while Redis is down, and its syncs fail as unreachable
	// until Redis is back.
	syncer, err := global.NewRedis(context.Background(), global.RedisConfig{Client: client})
	if err != nil {
		log.Fatal(err) // a mistake in the config, such as a client without ContextTimeoutEnabled
	}
	resp, err := syncer.Sync(context.Background(), &fleet.Request{
		Node:     "api-7",
		Interval: 100 * time.Millisecond,
		Keys: []fleet.Usage{{
			Key:      "tenant:acme",
			Limit:    fleet.Limit{Limit: 1000, Window: time.Second},
			Consumed: 42,
			Demand:   60,
		}},
	})
	switch {
	case errors.Is(err, fleet.ErrUnreachable):
		// Keep limiting locally on what is left of the last lease.
		return
	case err != nil:
		log.Fatal(err)
	}
	g := resp.Grants[0]
	if g.Err != nil {
		// This key alone failed: a bad limit (ErrInvalid), or state in
		// Redis no node wrote (ErrCorrupt). Treat it as the key's
		// policy says to treat a key the fleet cannot answer.
		log.Printf("tenant:acme: %v", g.Err)
		return
	}
	fmt.Printf("may spend %d in the next %v; %d nodes share the key\n", g.Lease, g.TTL, g.Nodes)
}

// Strict mode: every decision in Redis, exact across the fleet, one round
// trip per request.
func ExampleRedis_Allow() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	syncer, err := global.NewRedis(context.Background(), global.RedisConfig{Client: client})
	if err != nil {
		log.Fatal(err)
	}
	d, err := syncer.Allow(context.Background(), "login:alice",
		fleet.Limit{Algorithm: local.SlidingWindow, Limit: 5, Window: time.Minute}, 1)
	switch {
	case err != nil:
		// Redis unreachable (ErrUnreachable) or the key's state corrupt
		// (ErrCorrupt): nothing was decided; refuse, or fall back.
		log.Printf("login:alice: %v", err)
	case !d.Allowed:
		fmt.Println("try again in", d.RetryAfter)
	}
}
