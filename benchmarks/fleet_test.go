package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/internal/testkit/gossiptest"
	"github.com/hybridlimit/hybridlimit/local"
)

// The fleet benchmarks: fleetNodes nodes share one key limited to
// fleetLimit a second (a token bucket of as much burst), offered twice
// that for fleetRun, and each fleet's admissions are compared with an
// ideal single limiter fed the same arrivals.
const (
	fleetNodes    = 4
	fleetLimit    = 1000
	fleetRun      = 10 * time.Second
	fleetSteady   = 2 * time.Second        // the busiest window is sought from here on: the first second may spend the burst
	fleetInterval = 100 * time.Millisecond // hybrid's sync interval, gubernator's GlobalSyncWait (its default)
)

// fleetPolicy is the limit as hybridlimit states it, and as the ideal
// limiter applies it.
var fleetPolicy = hybrid.Policy{Name: "fleet", Algorithm: local.TokenBucket, Limit: fleetLimit, Window: time.Second, Burst: fleetLimit}

// fleetLoads are what each node is offered a second: twice the limit,
// spread evenly, or 80% of it on the first node.
var fleetLoads = []struct {
	name  string
	rates []float64
}{
	{"uniform", []float64{500, 500, 500, 500}},
	{"skewed", []float64{1600, 400.0 / 3, 400.0 / 3, 400.0 / 3}},
}

// fleetKinds start a fleet of fleetNodes nodes and return how each
// decides one request for a key.
var fleetKinds = []struct {
	name  string
	start func(b *testing.B) fleetOf
}{
	{"HybridRedis", hybridRedisFleet},
	{"HybridGossip", hybridGossipFleet},
	{"GubernatorGlobal", gubernatorFleet(guber.Behavior_GLOBAL)},
	{"GubernatorBatching", gubernatorFleet(guber.Behavior_BATCHING)},
}

// BenchmarkFleet measures fleet accuracy and caller-side latency. One
// iteration is a whole run of fleetRun, so it runs once at any
// -benchtime up to that; ns/op is the run's length and means nothing.
// The metrics are:
//
//   - util_%: admitted in all, in percent of what the ideal admitted;
//   - busiest_%: the most admitted in any 1 s window from fleetSteady
//     on, in percent of the limit;
//   - over_% and fr_%: per aligned 1 s window, admissions beyond the
//     ideal's and the ideal's admissions the fleet refused (false
//     rejection), in percent of the ideal's admissions;
//   - admitted/s: from fleetSteady to the end;
//   - p50_µs, p99_µs: how long a caller waited for a decision.
func BenchmarkFleet(b *testing.B) {
	for _, load := range fleetLoads {
		for _, kind := range fleetKinds {
			b.Run(kind.name+"/"+load.name, func(b *testing.B) {
				for range b.N {
					measureFleet(b, kind.start, load.rates)
				}
			})
		}
	}
}

// fleetOf is a running fleet: how each of its nodes decides one request
// for key.
type fleetOf func(key string) []fleettest.Decider

func measureFleet(b *testing.B, start func(b *testing.B) fleetOf, rates []float64) {
	fleet := start(b)
	key := fmt.Sprintf("fleet:%d", time.Now().UnixNano()) // the Redis server outlives a run
	// Every node decides a few requests a second for a second first, on
	// a key of their own, as in a fleet that has been running: its
	// connections are open, and a hybrid node has synced a key the
	// others share, so it knows the fleet's size and a new key's first
	// requests spend its part of the burst.
	fleettest.DriveDeciders(b, fleet(key+":warm"), func(_ int, now time.Duration) float64 { return 20 * now.Seconds() }, time.Second)
	nodes := fleet(key)
	r := fleettest.DriveDeciders(b, nodes, func(i int, now time.Duration) float64 { return rates[i] * now.Seconds() }, fleetRun)
	ideal := r.IdealRun(b, fleetPolicy)
	over, fr := r.Versus(ideal, time.Second)
	b.ReportMetric(100*float64(len(r.Admitted))/float64(max(1, len(ideal.Admitted))), "util_%")
	b.ReportMetric(100*float64(r.MaxInWindowFrom(time.Second, fleetSteady))/fleetLimit, "busiest_%")
	b.ReportMetric(over, "over_%")
	b.ReportMetric(fr, "fr_%")
	b.ReportMetric(float64(r.AdmittedBetween(fleetSteady, fleetRun))/(fleetRun-fleetSteady).Seconds(), "admitted/s")
	b.ReportMetric(float64(r.Percentile(0.5).Nanoseconds())/1e3, "p50_µs")
	b.ReportMetric(float64(r.Percentile(0.99).Nanoseconds())/1e3, "p99_µs")
}

// hybridFleet decides with each Limiter of fleet.
func hybridFleet(fleet []*hybrid.Limiter) fleetOf {
	return func(key string) []fleettest.Decider {
		out := make([]fleettest.Decider, len(fleet))
		for i, l := range fleet {
			out[i] = func() (bool, error) {
				d, err := l.Allow(key)
				return d.Allowed(), err
			}
		}
		return out
	}
}

func hybridRedisFleet(b *testing.B) fleetOf {
	addr := startRedis(b)
	fleet := fleettest.Limiters(b, fleetNodes, func(i int) hybrid.Config {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		s, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c})
		if err != nil {
			b.Fatal(err)
		}
		return hybrid.Config{Node: fmt.Sprintf("node-%d-%d", time.Now().UnixNano(), i+1), Policies: []hybrid.Policy{fleetPolicy}, Syncer: s, Interval: fleetInterval}
	})
	return hybridFleet(fleet)
}

func hybridGossipFleet(b *testing.B) fleetOf {
	peers := gossiptest.Start(b, fleetNodes, nil)
	fleet := fleettest.Limiters(b, fleetNodes, func(i int) hybrid.Config {
		return hybrid.Config{Policies: []hybrid.Policy{fleetPolicy}, Syncer: peers.Nodes[i], Interval: fleetInterval}
	})
	return hybridFleet(fleet)
}

// gubernatorFleet starts fleetNodes gubernator daemons in this process,
// on free loopback ports, that know each other as a static peer list,
// and decides through a gRPC client of each: a LEAKY_BUCKET of
// fleetLimit a second with a burst of as much, the token bucket
// fleetPolicy states, with the given behaviour (GLOBAL: a node answers
// from its copy and sends hits to the key's owner every GlobalSyncWait;
// BATCHING: a node asks the owner, batching what it asks within 500 µs).
// Node 0, which the skewed load makes busy, is never the key's owner.
func gubernatorFleet(behavior guber.Behavior) func(b *testing.B) fleetOf {
	return func(b *testing.B) fleetOf {
		log := logrus.New()
		log.SetOutput(io.Discard)
		var peers []guber.PeerInfo
		var daemons []*guber.Daemon
		for range fleetNodes {
			grpcAddr, httpAddr := freeAddr(b), freeAddr(b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
				Logger:            log.WithField("instance", grpcAddr),
				InstanceID:        grpcAddr,
				GRPCListenAddress: grpcAddr,
				HTTPListenAddress: httpAddr,
				AdvertiseAddress:  grpcAddr,
				Behaviors:         guber.BehaviorConfig{GlobalSyncWait: fleetInterval, GlobalTimeout: time.Second, BatchTimeout: time.Second},
			})
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { closeDaemon(b, d) })
			peers = append(peers, guber.PeerInfo{GRPCAddress: grpcAddr, HTTPAddress: httpAddr})
			daemons = append(daemons, d)
		}
		for _, d := range daemons {
			d.SetPeers(peers)
		}
		clients := make([]guber.V1Client, len(peers))
		for i, p := range peers {
			c, err := guber.DialV1Server(p.GRPCAddress, nil)
			if err != nil {
				b.Fatal(err)
			}
			clients[i] = c
		}
		return func(key string) []fleettest.Decider {
			// The key's owner decides last: under the skewed load the
			// busy node is one that does not own the key, as for 3 keys
			// in 4 in a fleet of 4.
			owner, err := daemons[0].V1Server.GetPeer(context.Background(), (&guber.RateLimitReq{Name: "fleet", UniqueKey: key}).HashKey())
			if err != nil {
				b.Fatal(err)
			}
			order := make([]guber.V1Client, 0, len(clients))
			var last guber.V1Client
			for i, c := range clients {
				if peers[i].GRPCAddress == owner.Info().GRPCAddress {
					last = c
				} else {
					order = append(order, c)
				}
			}
			if last == nil {
				b.Fatalf("gubernator: no peer owns %q", key)
			}
			order = append(order, last)
			out := make([]fleettest.Decider, len(order))
			for i, c := range order {
				out[i] = func() (bool, error) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					resp, err := c.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{
						Name: "fleet", UniqueKey: key, Hits: 1, Limit: fleetLimit, Burst: fleetLimit,
						Duration: time.Second.Milliseconds(), Algorithm: guber.Algorithm_LEAKY_BUCKET, Behavior: behavior,
					}}})
					if err != nil {
						return false, err
					}
					if len(resp.Responses) != 1 {
						return false, fmt.Errorf("gubernator: %d responses to one request", len(resp.Responses))
					}
					if e := resp.Responses[0].Error; e != "" {
						return false, errors.New("gubernator: " + e)
					}
					return resp.Responses[0].Status == guber.Status_UNDER_LIMIT, nil
				}
			}
			return out
		}
	}
}

// closeDaemon closes d, waiting at most 5 s: gubernator v2.13.0's
// Daemon.Close can wait forever for its GLOBAL hit sender, whose
// Interval.Stop waits on a goroutine blocked sending a tick nobody reads
// (seen here after every GLOBAL run). A daemon that does not close in
// time is left to the process's exit, its goroutines idle.
func closeDaemon(b *testing.B, d *guber.Daemon) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Close()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.Logf("gubernator daemon %s did not close within 5 s; left running", d.InstanceID)
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
