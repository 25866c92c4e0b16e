package gossip_test

import (
	"fmt"
	"os"
	"time"

	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Two nodes of a fleet sharing a limit of 100 requests per second per
// key with no Redis: each node runs a Gossip and a Limiter over it. In
// production each node is its own process, listing the others' addresses
// in Seeds.
func Example() {
	first, err := gossip.New(gossip.Config{Name: "a", BindAddr: "127.0.0.1", SecretKey: []byte("a 16-byte secret")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer first.Close()
	second, err := gossip.New(gossip.Config{Name: "b", BindAddr: "127.0.0.1", SecretKey: []byte("a 16-byte secret"),
		Seeds: []string{first.Addr()}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Close()

	limiter, err := hybrid.New(hybrid.Config{
		Node:     second.Name(),
		Policies: []hybrid.Policy{{Name: "api", Limit: 100, Window: time.Second}},
		Syncer:   second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close() // before the Gossip: it reports the last consumption

	d, err := limiter.Allow("key-42")
	fmt.Println(d.Allowed(), err, len(second.Members()))
	// Output: true <nil> 2
}

// A pod behind a Kubernetes headless service. Every pod lists the
// service's one DNS name as its seed; the name resolves to every pod's
// IP (publishNotReadyAddresses: true, so that pods find each other
// before they are ready). The first pod finds only itself there and is a
// fleet of one, at full strength; later pods join through the name, and
// pods that restart at new IPs are found at the next re-join. Run
// outside a cluster, the seed is this process itself, as the first pod
// sees it.
func Example_kubernetes() {
	podIP := os.Getenv("POD_IP") // from the downward API: status.podIP
	if podIP == "" {
		podIP = "127.0.0.1"
	}
	seed := os.Getenv("GOSSIP_SEED") // say limits.prod.svc.cluster.local:17946
	if seed == "" {
		seed = "localhost:17946"
	}
	g, err := gossip.New(gossip.Config{
		Name:      os.Getenv("POD_NAME"), // from the downward API: metadata.name; "" picks one
		BindAddr:  podIP,
		BindPort:  17946, // the same on every pod: the seed's port
		Seeds:     []string{seed},
		SecretKey: []byte("a 16-byte secret"), // from a Secret, in a real cluster
		Label:     "limits-prod",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	limiter, err := hybrid.New(hybrid.Config{
		Node:     g.Name(),
		Policies: []hybrid.Policy{{Name: "api", Limit: 100, Window: time.Second}},
		Syncer:   g,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close()

	d, err := limiter.Allow("key-42")
	fmt.Println(d.Allowed(), err, len(g.Members()), limiter.Health().Level)
	// Output: true <nil> 1 healthy
}
