package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

func TestMain(m *testing.M) {
	if os.Getenv(asServer) != "" {
		main() // a process of TestKill
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"), // memberlist's probe may outlive Shutdown by a timeout
	)
}

// TestParse: flags, the environment for what they leave unset, and
// refusals that say what to do.
func TestParse(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HYBRIDLIMITD_REDIS": "redis:6379", "HYBRIDLIMITD_HTTP": ":9999"}
	o, err := parse([]string{"--config", "r.yaml", "--http", ":7000"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "redis:6379", o.redis, "from the environment")
	assert.Equal(t, ":7000", o.httpAddr, "a flag wins")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "give --config"},
		{[]string{"--config", "r", "--tls-cert", "c"}, "go together"},
		{[]string{"--config", "r", "--gossip-seeds", "a"}, "needs --gossip-bind"},
		{[]string{"--config", "r", "extra"}, `unexpected argument "extra"`},
		{[]string{"--config", "r", "--shutdown-grace", "soon"}, "invalid value"},
		{[]string{"--config", "r", "--gossip-grace", "0s"}, "give a positive duration"},
	} {
		_, err := parse(tt.args, func(string) string { return "" }, io.Discard)
		assert.ErrorContains(t, err, tt.want, "%v", tt.args)
	}
	_, err = parse([]string{"--config", "r"}, func(k string) string { return map[string]string{"HYBRIDLIMITD_SYNC_INTERVAL": "often"}[k] }, io.Discard)
	assert.ErrorContains(t, err, "HYBRIDLIMITD_SYNC_INTERVAL")
}

// TestHTTP: a server of the example rules file alone (no fleet) answers
// the rate check, the rules API with its token, /metrics, /healthz and
// /readyz; stopping, it fails /readyz before it closes.
func TestHTTP(t *testing.T) {
	t.Parallel()
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("s3cret\n"), 0o600))
	o := &options{config: "../../docs/examples/rules.yaml", adminToken: token, httpAddr: "127.0.0.1:0", grace: time.Second}
	s, err := start(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	base := "http://" + s.httpAddr.String()
	get := func(path, auth string) (int, string) {
		req, err := http.NewRequest("GET", base+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz", "")
	assert.Equal(t, http.StatusOK, code, body)
	code, _ = get("/healthz", "")
	assert.Equal(t, http.StatusOK, code)
	code, _ = get("/healthcheck", "")
	assert.Equal(t, http.StatusOK, code, "envoyproxy/ratelimit's probe")
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"tenant": "acme", "tier": "pro", "endpoint": "GET /api/x", "ip": "192.0.2.1"}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(b), `"allowed":true`)
	code, _ = get("/admin/v1/rules", "")
	assert.Equal(t, http.StatusForbidden, code, "no token")
	code, body = get("/admin/v1/rules", "Bearer s3cret")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"per-ip"`)
	code, body = get("/metrics", "")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "hybridlimit_keys")

	s.stopping.Store(true) // as shutdown does first
	code, _ = get("/readyz", "")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	require.NoError(t, s.shutdown())
}

// TestFleet: three hybridlimitd sharing limits over gossip, or through a
// real Redis, offered twice a descriptor's limit (a token bucket of 500 a
// second holding 500) through their gRPC services; the busiest second
// from the third (the first two hold the bucket's burst: an ideal
// limiter admits up to 1,000 in the first) and after one of them is
// stopped (it says goodbye, and hands its leases back). The target is 5%
// over the limit; measured under -race, Redis 538 and 525 after the
// stop, gossip 516 and 539, and under a whole CI run Redis once 607. The
// test holds Redis to 15% and gossip to 30%, to catch breakage, not
// noise.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("three servers driven for 8 s, twice")
	}
	t.Parallel()
	for _, via := range []string{"redis", "gossip"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			bound := 575
			redisAddr := ""
			if via == "redis" {
				redisAddr = redistest.StartServer(t).Addr
			} else {
				bound = 650
			}
			testFleet(t, redisAddr, bound)
		})
	}
}

func testFleet(t *testing.T, redisAddr string, bound int) {
	var servers []*server
	var clients []rlspb.RateLimitServiceClient
	seed := ""
	for i := range 3 {
		o := &options{envoy: []string{"../../docs/examples/envoy/mongo_cps.yaml"}, node: fmt.Sprint("hld-", i), redis: redisAddr}
		if redisAddr == "" {
			o.gossipBind, o.gossipSeeds = "127.0.0.1:0", seed
		}
		c, s := startRLS(t, o)
		if seed == "" && s.gossip != nil {
			seed = s.gossip.Addr()
		}
		servers, clients = append(servers, s), append(clients, c)
	}
	require.Eventually(t, func() bool {
		for _, s := range servers {
			if s.limiter.Health().Level != partition.Healthy {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
	at := driveRLS(t, clients, 5*time.Second)
	resp, err := http.Get("http://" + servers[0].httpAddr.String() + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if redisAddr == "" { // gossip's own metrics beside the Limiter's
		assert.Contains(t, string(b), "hybridlimit_gossip_members 3")
		assert.Contains(t, string(b), "hybridlimit_gossip_sent_bytes_total")
	} else { // and Redis's
		assert.Regexp(t, `hybridlimit_redis_commands_total [1-9]`, string(b))
		assert.Regexp(t, `hybridlimit_redis_round_trips_total [1-9]`, string(b))
	}
	first, all := busiest(at, 0, 2*time.Second), busiest(at, 2*time.Second, 5*time.Second)
	require.NoError(t, servers[2].shutdown())
	// From its second second: the stop's drain leaves the bucket idle a
	// moment, and what it refills meanwhile is spent in the first.
	two := busiest(driveRLS(t, clients[:2], 3*time.Second), time.Second, 3*time.Second)
	t.Logf("%s: limit 500/s, offered 1,000/s: busiest second %d with three servers from the third (%d in the first two, with the burst); %d with two after one stopped",
		t.Name(), all, first, two)
	assert.LessOrEqual(t, all, bound)
	assert.GreaterOrEqual(t, all, 450)
	assert.LessOrEqual(t, two, bound)
}

// TestSharedRules: two hybridlimitd keep their rules in the fleet (in
// Redis, or over gossip with no Redis); a rule changed through one's API
// is in force on the other within a second.
func TestSharedRules(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "gossip"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			sharedRules(t, backend)
		})
	}
}

func sharedRules(t *testing.T, backend string) {
	config, redisAddr := "../../docs/examples/rules.yaml", ""
	if backend == "redis" {
		redisAddr = redistest.StartServer(t).Addr
	} else { // the example's Strict rule needs Redis
		config = filepath.Join(t.TempDir(), "rules.yaml")
		require.NoError(t, os.WriteFile(config, []byte("rules:\n  - {name: per-ip, key: [ip], limit: 100, window: 1s}\n"), 0o600))
	}
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("s3cret"), 0o600))
	var bases []string
	var servers []*server
	for i := range 2 {
		o := &options{config: config, redis: redisAddr, shared: true, adminToken: token,
			node: fmt.Sprint("n", i), httpAddr: "127.0.0.1:0", grace: time.Second, syncInterval: 100 * time.Millisecond,
			gossipGrace: 30 * time.Second}
		if backend == "gossip" {
			o.gossipBind = "127.0.0.1:0"
			if i > 0 {
				o.gossipSeeds = servers[0].gossip.Addr()
			}
		}
		s, err := start(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, s.shutdown()) })
		bases, servers = append(bases, "http://"+s.httpAddr.String()), append(servers, s)
	}
	// The first node to follow seeds the store; a change made before is
	// made to no version, and refused (409) once the seed is in.
	// Over gossip, a node whose join timed out (a loaded machine) seeds
	// its own version, and the two agree at its next re-join (2 s).
	require.Eventually(t, func() bool {
		v := servers[0].rules.Version()
		return v > 0 && servers[1].rules.Version() == v
	}, 15*time.Second, 10*time.Millisecond)
	limit := func(base string) string {
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"ip": "192.0.2.99", "hits": 0}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	require.Eventually(t, func() bool { return strings.Contains(limit(bases[1]), `"limit":100`) }, 5*time.Second, 10*time.Millisecond)
	req, err := http.NewRequest("PUT", bases[0]+"/admin/v1/rules/per-ip", strings.NewReader(`{"key": ["ip"], "limit": 7, "window": "1s"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	changed := time.Now()
	require.Eventually(t, func() bool { return strings.Contains(limit(bases[1]), `"limit":7`) }, time.Second, 10*time.Millisecond,
		"the other node within a second")
	t.Logf("in force on the other node after %v", time.Since(changed))
}

// driveRLS offers each of clients 333 requests a second for d, on the
// mongo_cps example's users descriptor (a token bucket of 500 a second
// holding 500), and returns when each admitted request came, since the
// start.
func driveRLS(t *testing.T, clients []rlspb.RateLimitServiceClient, d time.Duration) []time.Duration {
	_, admitted := offerRLS(t, clients, d)
	return admitted
}

// offerRLS is driveRLS returning every request's time as well (offered)
// beside the admitted ones'. A client whose calls fall behind (on a
// loaded machine) catches up with a burst.
func offerRLS(t *testing.T, clients []rlspb.RateLimitServiceClient, d time.Duration) (offered, admitted []time.Duration) {
	req := &rlspb.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*commonpb.RateLimitDescriptor{desc("database=users")}}
	var mu sync.Mutex
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			var sent atomic.Int64
			for now := time.Since(start); now < d; now = time.Since(start) {
				for ; sent.Load() < int64(333*now.Seconds()); sent.Add(1) {
					at := time.Since(start)
					resp, err := c.ShouldRateLimit(context.Background(), req)
					ok := assert.NoError(t, err) && resp.OverallCode == rlspb.RateLimitResponse_OK
					mu.Lock()
					offered = append(offered, at)
					if ok {
						admitted = append(admitted, at)
					}
					mu.Unlock()
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	return offered, admitted
}

// busiest is the most of at in any second that starts at or after from
// and ends by d, in steps of 50 ms.
func busiest(at []time.Duration, from, d time.Duration) int {
	best := 0
	for ; from+time.Second <= d; from += 50 * time.Millisecond {
		n := 0
		for _, a := range at {
			if a >= from && a < from+time.Second {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}
