package gossip_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// freePort returns a port free on ip for both TCP and UDP, as a gossip
// node binds both.
func freePort(t *testing.T, ip string) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		require.NoError(t, err)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		_ = l.Close()
		if err == nil {
			_ = u.Close()
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return 0
}

// TestLoneNodeIsAFleetOfOne starts a node whose every seed is itself, as
// the first pod of a headless service sees the service's name, behind a
// Limiter of 100/s offered 200/s. A fleet of one is a whole fleet: the
// node is Healthy and admits the full limit, not the ladder's share of it.
func TestLoneNodeIsAFleetOfOne(t *testing.T) {
	t.Parallel()
	const (
		limit = 100
		run   = 3 * time.Second
	)
	tests := []struct {
		name  string
		seeds func(port int) []string
	}{
		{"its own address", func(p int) []string { return []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(p))} }},
		{"a DNS name for itself", func(p int) []string { return []string{net.JoinHostPort("localhost", strconv.Itoa(p))} }},
		{"both, twice", func(p int) []string {
			return []string{net.JoinHostPort("localhost", strconv.Itoa(p)), net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), net.JoinHostPort("localhost", strconv.Itoa(p))}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			port := freePort(t, "127.0.0.1")
			g, err := gossip.New(gossip.Config{Name: "only", BindAddr: "127.0.0.1", BindPort: port, Seeds: tt.seeds(port)})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, g.Close()) })
			policy := hybrid.Policy{Name: "api", Limit: limit, Window: time.Second, Mode: hybrid.Hybrid}
			nodes := fleettest.Limiters(t, 1, func(int) hybrid.Config {
				return hybrid.Config{Node: "only", Policies: []hybrid.Policy{policy}, Syncer: g}
			})
			r := fleettest.Drive(t, nodes, "k", []float64{2 * limit}, run)
			h := nodes[0].Health()
			// The first second spends the burst; the next two are the rate.
			rate := float64(r.AdmittedBetween(time.Second, run, 0)) / (run - time.Second).Seconds()
			t.Logf("seeds %v: health %v (factor %v), admitted %.0f/s of %d/s", tt.seeds(port), h.Level, h.Factor, rate, limit)
			assert.Equal(t, partition.Healthy, h.Level, "a fleet of one is whole")
			assert.GreaterOrEqual(t, rate, limit*0.8, "and admits its whole limit (less what a starved machine delays)")
			assert.Len(t, g.Members(), 1)
		})
	}
}

// TestSeedLookupFailureIsVisible starts nodes whose seeds cannot all be
// resolved or reached: none is a fleet of one, and Sync says why.
func TestSeedLookupFailureIsVisible(t *testing.T) {
	t.Parallel()
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host == "self.test" {
			return []string{"127.0.0.1"}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	tests := []struct {
		name  string
		seeds func(port int) []string
		want  string
	}{
		{"a name that does not resolve", func(int) []string { return []string{"limits.invalid:7946"} }, "limits.invalid"},
		{"itself and a name that does not resolve", func(p int) []string {
			return []string{net.JoinHostPort("self.test", strconv.Itoa(p)), "limits.invalid:7946"}
		}, "limits.invalid"},
		{"itself and a peer that does not answer", func(p int) []string {
			return []string{net.JoinHostPort("self.test", strconv.Itoa(p)), net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))}
		}, "no seed has answered yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			port := freePort(t, "127.0.0.1")
			g, err := gossip.New(gossip.Config{Name: "n", BindAddr: "127.0.0.1", BindPort: port, Seeds: tt.seeds(port),
				LookupHost: lookup, TCPTimeout: 200 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, g.Close()) })
			_, err = g.Sync(t.Context(), &fleet.Request{Interval: time.Second})
			require.ErrorIs(t, err, fleet.ErrUnreachable)
			assert.ErrorContains(t, err, tt.want)
			if tt.want == "limits.invalid" {
				assert.Positive(t, g.Stats().SeedLookupFailures, "Stats counts the failed lookups")
			} else {
				assert.Zero(t, g.Stats().SeedLookupFailures)
			}
		})
	}
}
