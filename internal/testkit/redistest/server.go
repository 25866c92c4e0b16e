// Package redistest starts real redis-server processes for tests.
//
// The limiter's Redis code is proven against a real server, not a fake: a
// fake would agree with whatever the code under test believes about Lua,
// cluster redirects and failures. Each server gets free loopback ports, its
// own temporary directory and a log file, and is killed and reaped when the
// test that started it finishes, so tests can run in parallel and leave
// nothing behind.
//
// A typical test starts what it needs and talks to it through go-redis:
//
//	func TestLimiter(t *testing.T) {
//		t.Parallel()
//		srv := redistest.StartServer(t)
//		rdb := srv.Client(t)
//		// ... use rdb; srv.Kill() and srv.Restart(t) to test failures.
//	}
//
// A cluster takes about 2 s to become ready, so tests share one through
// subtests rather than starting their own:
//
//	c := redistest.StartCluster(t, 3)
//	rdb := c.ClusterClient(t)
//	owner := c.MasterFor("{tenant}:bucket") // the node to kill to lose the key
//
// The redis-server binary is looked up by [ServerPath]. Without one the
// tests skip, except in CI, where they fail so that a missing binary cannot
// silently turn the Redis tests into no-ops.
//
// Packages whose tests check for leaked goroutines with goleak should pass
// it [LeakOptions].
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// EnvServer names the environment variable that, when set, gives the path
// of the redis-server binary to use instead of the one found in PATH.
const EnvServer = "HYBRIDLIMIT_REDIS_SERVER"

const (
	// startTimeout bounds how long a server may take to answer its first
	// command. A loopback redis-server with no data is ready in milliseconds;
	// the slack is for overloaded CI machines running many packages at once.
	startTimeout = 5 * time.Second

	// stopTimeout bounds a graceful shutdown before Stop falls back to
	// SIGKILL. With persistence off and no replicas, SIGTERM is immediate.
	stopTimeout = 10 * time.Second

	// startAttempts is how many free ports StartServer tries. A port found
	// free can be taken by someone else before redis-server binds it, which
	// is rare enough that a few attempts make it vanish.
	startAttempts = 5

	// logTail is how much of the end of a server's log goes into failure
	// messages: enough for the reason redis-server gave, short enough to read.
	logTail = 4 << 10
)

// ServerPath returns the path of the redis-server binary: the value of
// $HYBRIDLIMIT_REDIS_SERVER if set, otherwise redis-server from PATH.
//
// If there is no usable binary, ServerPath skips the test, or fails it when
// $CI is "true": in CI a skipped Redis test would look like a passing one.
func ServerPath(tb testing.TB) string {
	tb.Helper()
	const install = "install it (Debian/Ubuntu: apt-get install redis-server), " +
		"set " + EnvServer + " to its path, or run `make test`, which installs it"
	var reason string
	if p := os.Getenv(EnvServer); p != "" {
		// An explicit path that does not work is a mistake to report, not a
		// cue to quietly fall back to some other binary from PATH.
		if _, err := exec.LookPath(p); err != nil {
			reason = fmt.Sprintf("%s=%s is not an executable redis-server (%v)", EnvServer, p, err)
		} else {
			return p
		}
	} else if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	} else {
		reason = "redis-server not found in PATH"
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("redistest: %s; CI must run the Redis tests: %s", reason, install)
	}
	tb.Skipf("redistest: %s; to run the Redis tests, %s", reason, install)
	return ""
}

// A Server is a redis-server process started by [StartServer] or
// [StartCluster]. It listens on Addr for as long as it runs, including
// after [Server.Restart]. Its methods are safe for concurrent use.
//
// Methods that can fail report to the testing.TB they are given, not to
// the one that started the server, since a server is often shared by
// subtests and FailNow must be called from the goroutine of its own test.
type Server struct {
	// Addr is the address clients dial: "127.0.0.1:<Port>".
	Addr string

	// Port is the TCP port the server listens on. It never changes, so
	// clients and cluster peers find the server again after a restart.
	Port int

	tb      testing.TB
	bin     string   // redis-server binary
	dir     string   // working directory, holding the log and any data files
	logPath string   // receives the server's stdout and stderr
	args    []string // command line after bin, the same for every start
	busPort int      // cluster bus port of a cluster node, else 0

	mu   sync.Mutex
	proc *process // the current or last process; nil until one started
}

// StartServer starts a redis-server on a free port of 127.0.0.1 and waits
// until it answers commands. Persistence is off, so a restart begins with an
// empty data set. Extra command-line arguments, such as "--maxmemory",
// "1mb", are appended after the defaults and so override them.
//
// The server is killed when the test and its subtests finish. If the test
// failed, the end of the server's log is written to the test log.
func StartServer(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return startServer(tb, false, args)
}

// startServer starts a server, adding the arguments of a cluster node when
// cluster is set. The cluster bus needs a second port: redis-server's
// default, port+10000, is neither known to be free nor always below 65536.
func startServer(tb testing.TB, cluster bool, extra []string) *Server {
	tb.Helper()
	bin := ServerPath(tb)
	// The directory must exist before the cleanup below is registered:
	// cleanups run last-registered first, so the process is dead before
	// the testing package removes the directory it writes to.
	dir := tb.TempDir()
	s := &Server{tb: tb, bin: bin, dir: dir, logPath: filepath.Join(dir, "redis.log")}
	tb.Cleanup(s.cleanup)

	var err error
	for range startAttempts {
		ports, perr := freePorts(1 + btoi(cluster))
		if perr != nil {
			tb.Fatalf("redistest: %v", perr)
		}
		s.Port = ports[0]
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		s.args = []string{
			"--port", strconv.Itoa(s.Port),
			"--bind", "127.0.0.1",
			"--protected-mode", "no",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
		}
		if cluster {
			s.busPort = ports[1]
			s.args = append(s.args,
				"--cluster-enabled", "yes",
				"--cluster-port", strconv.Itoa(ports[1]),
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", s.Port)),
				"--cluster-node-timeout", "2000",
				// A node learns its own address from the first node that
				// meets it, so a node nobody meets, as in a cluster of
				// one, would report an empty host to cluster clients.
				"--cluster-announce-ip", "127.0.0.1",
			)
		}
		s.args = append(s.args, extra...)

		s.mu.Lock()
		err = s.start()
		s.mu.Unlock()
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return s
}

// Stop shuts the server down gracefully with SIGTERM, as an operator would,
// and waits for the process to exit. Stop does nothing if the server is
// not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return
	}
	if !s.proc.signalAndWait(syscall.SIGTERM, stopTimeout) {
		// A shutdown that hangs is a redis-server problem, not the test's;
		// say so and make sure the process still goes away.
		s.tb.Logf("redistest: redis-server %s ignored SIGTERM for %v; killing it", s.Addr, stopTimeout)
		s.proc.signalAndWait(syscall.SIGKILL, 0)
	}
}

// Kill kills the server with SIGKILL, simulating a crash, and waits for the
// process to exit. Kill does nothing if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.signalAndWait(syscall.SIGKILL, 0)
	}
}

// Restart starts the server again on the same port and waits until it
// answers commands, stopping it first if it is still running. The data set
// starts empty; a cluster node keeps its identity and slots, which it
// reads back from its nodes.conf. A failure to start fails tb's test.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.signalAndWait(syscall.SIGTERM, stopTimeout) {
		s.proc.signalAndWait(syscall.SIGKILL, 0)
	}
	// The port was ours until a moment ago, but an outgoing connection may
	// have been given it as its local port since; that passes quickly.
	var err error
	for range startAttempts {
		if err = s.start(); !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		tb.Fatalf("redistest: restart: %v", err)
	}
}

// Running reports whether the server process is alive. A server that was
// stopped, killed or crashed is not running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Options returns go-redis options for a client of the server, for tests
// that need to change the defaults before creating a client.
//
// The client skips the connection handshake steps that Redis 7.0 does not
// know, CLIENT SETINFO and CLIENT MAINT_NOTIFICATIONS. go-redis ignores
// their failure, but each new connection would still spend three round
// trips on errors that show up in the server's INFO errorstats.
func (s *Server) Options() *redis.Options {
	return &redis.Options{
		Addr:                     s.Addr,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// Client returns a client of the server with [Server.Options], closed when
// tb's test finishes. The client outlives restarts of the server: like an
// application's client, it reconnects on the next command.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(s.Options())
	tb.Cleanup(func() { c.Close() })
	return c
}

// DeadlineClient is Client with ContextTimeoutEnabled, so every call
// honours its context's deadline, as global.NewRedis requires.
func (s *Server) DeadlineClient(tb testing.TB) *redis.Client {
	tb.Helper()
	o := s.Options()
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	tb.Cleanup(func() { c.Close() })
	return c
}

// FlushAll deletes every key on the server, so that tests sharing a server
// can each start from an empty data set.
func (s *Server) FlushAll(tb testing.TB) {
	tb.Helper()
	c := redis.NewClient(s.Options())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.FlushAll(ctx).Err(); err != nil {
		tb.Fatalf("redistest: FLUSHALL on %s: %v", s.Addr, err)
	}
}

// Log returns the last few kilobytes of the server's log, which collects
// what redis-server wrote to stdout and stderr across restarts. Tests can
// include it in a failure message.
func (s *Server) Log() string {
	return readTail(s.logPath, 0)
}

// cleanup kills the server when its test finishes and, if the test failed,
// logs the end of the server's log while the file still exists.
func (s *Server) cleanup() {
	s.Kill()
	if s.tb.Failed() {
		s.tb.Logf("redistest: log of redis-server %s:\n%s", s.Addr, s.Log())
	}
}

// errAddrInUse marks a start that failed because a port was taken.
var errAddrInUse = errors.New("address already in use")

// start starts a process with s.args and waits until it is ready. It is
// called with s.mu held and no process running.
func (s *Server) start() error {
	// Append, so the log of a restarted server still holds what the earlier
	// processes wrote; the offset lets errors quote only this start.
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	offset, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		logFile.Close()
		return err
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	// An *os.File is handed to the child as is, so no goroutine copies the
	// output, and the log survives the child.
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logFile.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("starting %s: %v", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go p.wait()
	s.proc = p

	if err := s.waitReady(p); err != nil {
		p.signalAndWait(syscall.SIGKILL, 0)
		out := readTail(s.logPath, offset)
		if strings.Contains(out, "Address already in use") {
			err = errAddrInUse
		}
		return fmt.Errorf("redis-server on %s: %w\n%s %s\nlog:\n%s",
			s.Addr, err, s.bin, strings.Join(quoteArgs(s.args), " "), out)
	}
	return nil
}

// waitReady waits until p answers on s.Addr, failing early if p exits.
//
// It checks the process ID in the answer, not just that something
// answered: if another test's server took the port first, that server
// answers PING while p is failing to bind.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready: %v", p.err)
		default:
		}
		pid, err := serverPID(s.Addr)
		switch {
		case err != nil:
			lastErr = err
		case pid != p.cmd.Process.Pid:
			lastErr = fmt.Errorf("%w: another redis-server (pid %d) answers there", errAddrInUse, pid)
		default:
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", startTimeout, lastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serverPID asks the server at addr for its process ID with INFO server.
// It speaks RESP directly rather than through go-redis, since a client
// made and closed for every poll would only add goroutines and log noise.
func serverPID(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(conn, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "$") {
		// For example "-LOADING ..." from a server still starting up.
		return 0, fmt.Errorf("INFO server: %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 {
		return 0, fmt.Errorf("INFO server: bad reply header %q", line)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server: no process_id")
}
