package snippets

import (
	"context"
	"log"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/partition"
)

// The README's snippets, each in a function that declares what it takes
// from around it. They are compiled, not run.

func readmeUse(ctx context.Context, w http.ResponseWriter, apiKey string) {
	// ContextTimeoutEnabled lets each call's deadline bound the socket;
	// without it go-redis waits out its own 3 s on a Redis that stopped
	// answering, and NewRedis refuses the client.
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	redisFleet, err := global.NewRedis(ctx, global.RedisConfig{Client: client})
	if err != nil {
		log.Fatal(err) // a client that could block past the timeout
	}
	limiter, err := hybrid.New(hybrid.Config{
		Policies: []hybrid.Policy{
			{Name: "api", Prefix: "api:", Limit: 100, Window: time.Second},
			{Name: "ip", Prefix: "ip:", Limit: 1000, Window: time.Minute},
		},
		Syncer: redisFleet,
	})
	if err != nil {
		log.Fatal(err) // names the field that is out of range
	}
	defer limiter.Close() // hands this node's leases back

	d, err := limiter.Allow("api:" + apiKey) // ~50 ns, no allocation, no network
	if err != nil {
		http.Error(w, "bad API key", http.StatusBadRequest) // too long, say; d refuses too
		return
	}
	if !d.Allowed() {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.RetryAfter().Seconds()))))
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	}
}

func readmeHTTP(limiter *hybrid.Limiter, trustedProxies []netip.Prefix, mux *http.ServeMux) {
	clientIP, err := httplimit.IP(httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: trustedProxies}) // the one field your proxies set
	if err != nil {
		log.Fatal(err)
	}
	limit, err := httplimit.New(httplimit.Config{Limiter: limiter, Limits: []httplimit.Limit{
		{Name: "api", Key: httplimit.Header("X-API-Key"), HashKeys: true}, // the "api" policy's Prefix and Window
		{Name: "ip", Key: clientIP},                                       // and the "ip" policy's
	}})
	if err != nil {
		log.Fatal(err) // a limit with no policy, say
	}
	log.Fatal(http.ListenAndServe(":8080", limit(mux)))
}

func readmeGossip(peers []string, key []byte, policies []hybrid.Policy) {
	fleet, err := gossip.New(gossip.Config{BindPort: 7946, Seeds: peers, SecretKey: key, Label: "prod"})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := hybrid.New(hybrid.Config{Node: fleet.Name(), Syncer: fleet, Policies: policies})
	_, _ = limiter, err
}

func readmeFailover(peers *gossip.Gossip, redisFleet *global.Redis, policies []hybrid.Policy) {
	limiter, err := hybrid.New(hybrid.Config{
		Node: peers.Name(), Syncer: redisFleet, Failover: peers, Policies: policies,
		Ladder: partition.LadderConfig{Steps: partition.DefaultSteps}, // 1 → 0.5 after 5s → 0.25 after 1m
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("fleet link: %+v", limiter.Health()) // Healthy, Degraded or Emergency
}

var _ = []any{readmeUse, readmeHTTP, readmeGossip, readmeFailover}
