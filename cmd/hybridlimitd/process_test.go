package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/local"
)

// asServer is the environment variable that makes this test binary run
// hybridlimitd's main instead of the tests: the processes of TestKill.
const asServer = "HYBRIDLIMITD_TEST_PROCESS"

// process is hybridlimitd running as a process of its own.
type process struct {
	cmd    *exec.Cmd
	http   string // host:port
	grpc   string
	gossip string
	mu     sync.Mutex
	log    bytes.Buffer
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

// startProcess starts hybridlimitd (this test binary, as asServer says)
// with args and addresses of its own, and waits until /readyz answers
// 200. It is killed, if still running, when the test ends; its log is
// printed if the test failed.
func startProcess(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{http: freeAddr(t), grpc: freeAddr(t), gossip: freeAddr(t)}
	args = append([]string{"--node", name, "--http", p.http, "--grpc", p.grpc, "--gossip-bind", p.gossip, "--shutdown-grace", "1s"}, args...)
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), asServer+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s's log:\n%s", name, p.log.String())
			p.mu.Unlock()
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + p.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "%s ready", name)
	return p
}

// client is a gRPC client of p's rate limit service.
func (p *process) client(t *testing.T) rlspb.RateLimitServiceClient {
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// TestKill: three hybridlimitd processes share the mongo_cps example's
// limit (a token bucket of 500 a second holding 500), over Redis or over
// gossip, offered twice it; one is killed (SIGKILL: no goodbye, no lease
// handed back, whatever it held lost with it). The two left go on within
// the ladder's bound: never over the limit by more than the bound, never
// under their own shares, and the dead member's share comes back as it
// is bound to. A member that has gone silent may be cut off and still
// spending, so its share stays reserved: over Redis along the fallback
// ladder's finite steps (its whole share for 5 s, half of it until a
// minute), over gossip for --gossip-grace (30 s by default, 2 s here).
func TestKill(t *testing.T) {
	if testing.Short() {
		t.Skip("three processes driven for 13 s, twice")
	}
	// Not beside the package's parallel tests: its six processes starved
	// TestFleet's callers, which caught up in bursts the bucket's savings
	// admitted (615 and 699 in a second against 500 under a CI run). Its
	// two fleets one after the other, for the same reason: side by side on
	// 2 cores their callers offered 568-619 a second of the 666 asked, and
	// the Redis fleet's first second after the kill admitted 582-645
	// against an ideal's 511-514 (2 of 3 runs, 2026-12-07); one at a time,
	// 437-463 in every run.
	for _, via := range []string{"redis", "gossip"} {
		t.Run(via, func(t *testing.T) {
			args := []string{"--envoy-config", "../../docs/examples/envoy/mongo_cps.yaml", "--gossip-grace", "2s"}
			if via == "redis" {
				args = append(args, "--redis", redistest.StartServer(t).Addr)
			}
			var procs []*process
			for i := range 3 {
				a := args
				if i > 0 {
					a = append(a, "--gossip-seeds", procs[0].gossip)
				}
				procs = append(procs, startProcess(t, fmt.Sprint("kill-", i), a...))
			}
			clients := []rlspb.RateLimitServiceClient{procs[0].client(t), procs[1].client(t), procs[2].client(t)}
			driveRLS(t, clients, time.Second) // every node has heard the others on the key
			offeredBefore, before := offerRLS(t, clients, 3*time.Second)
			require.NoError(t, procs[2].cmd.Process.Kill())
			offered, after := offerRLS(t, clients[:2], 9*time.Second)
			// An ideal single limiter fed the same requests, from before
			// the kill: a client that fell behind on a loaded machine
			// catches up with a burst, which the bucket's savings may
			// rightly admit.
			ideal, err := local.New(local.Config{Algorithm: local.TokenBucket, Limit: 500, Window: time.Second, Burst: 500, Clock: clock.NewManual(time.Unix(0, 0))})
			require.NoError(t, err)
			slices.Sort(offeredBefore)
			slices.Sort(offered)
			epoch := time.Unix(0, 0)
			for _, at := range offeredBefore {
				_, _ = ideal.AllowNAt("k", epoch.Add(at), 1)
			}
			var idealAdmitted []time.Duration
			for _, at := range offered {
				if r, _ := ideal.AllowNAt("k", epoch.Add(3*time.Second+at), 1); r.Allowed() {
					idealAdmitted = append(idealAdmitted, at)
				}
			}
			perSecond, asked := make([]int, 9), make([]int, 9)
			for _, a := range after {
				perSecond[min(int(a/time.Second), 8)]++ // the last call may end a moment after 9 s
			}
			for _, a := range offered {
				asked[min(int(a/time.Second), 8)]++
			}
			worst, idealWorst := busiest(after, 0, 9*time.Second), busiest(idealAdmitted, 0, 9*time.Second)
			t.Logf("%s: limit 500/s, offered 1,000/s: busiest second before the kill %d (three processes); after it %d (two; an ideal limiter %d); admitted each second after: %v of %v",
				t.Name(), busiest(before, time.Second, 3*time.Second), worst, idealWorst, perSecond, asked)
			assert.LessOrEqual(t, worst, max(idealWorst, 500)+75, "busiest second after the kill: the ideal's (or the limit, 500) and 15%%")
			for s, n := range perSecond {
				assert.GreaterOrEqual(t, n, min(250, asked[s]*9/10), "admitted in second %d after the kill: the survivors' own shares, 333, less 25%% for a loaded machine", s)
			}
			// From 6 s on: over gossip the share is free (the whole limit,
			// 500); over Redis half of it still reserved (417; 350 leaves room
			// for a loaded machine and stays above the survivors' own 333).
			want := 450
			if via == "redis" {
				want = 350
			}
			for s, n := range perSecond[6:] {
				assert.GreaterOrEqual(t, n, min(want, asked[s+6]*9/10), "admitted in second %d after the kill", s+6)
			}
		})
	}
}
