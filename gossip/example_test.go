package gossip_test

import (
	"fmt"
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
