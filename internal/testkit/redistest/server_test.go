package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// recordingTB records a Fatalf or Skipf and stops the goroutine calling it,
// as the real ones do, without failing or skipping the enclosing test.
type recordingTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestServerPath(t *testing.T) {
	// Not parallel: it sets environment variables.
	bin := t.TempDir()
	fake := filepath.Join(bin, "redis-server")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755))
	notExec := filepath.Join(t.TempDir(), "redis-server")
	require.NoError(t, os.WriteFile(notExec, nil, 0o644))
	empty := t.TempDir()

	tests := []struct {
		name       string
		env, path  string
		ci         string
		want       string // returned path, if any
		wantFatal  bool
		wantSkip   bool
		wantReason string
	}{
		{name: "env", env: fake, path: empty, want: fake},
		{name: "env wins over PATH", env: fake, path: bin, want: fake},
		{name: "PATH", path: bin, want: fake},
		{name: "missing env in CI", env: "/nonexistent", path: bin, ci: "true", wantFatal: true, wantReason: "/nonexistent"},
		{name: "missing env", env: "/nonexistent", path: bin, wantSkip: true, wantReason: "/nonexistent"},
		{name: "env not executable", env: notExec, path: bin, wantSkip: true, wantReason: notExec},
		{name: "missing in CI", path: empty, ci: "true", wantFatal: true, wantReason: "not found in PATH"},
		{name: "missing", path: empty, wantSkip: true, wantReason: "not found in PATH"},
		{name: "CI not true", path: empty, ci: "1", wantSkip: true, wantReason: "not found in PATH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvServer, tt.env)
			t.Setenv("PATH", tt.path)
			t.Setenv("CI", tt.ci)

			rec := &recordingTB{TB: t}
			var got string
			done := make(chan struct{})
			go func() {
				defer close(done)
				got = ServerPath(rec)
			}()
			<-done

			assert.Equal(t, tt.want, got)
			msg := rec.fatal + rec.skip
			assert.Equal(t, tt.wantFatal, rec.fatal != "", "Fatalf called: %q", rec.fatal)
			assert.Equal(t, tt.wantSkip, rec.skip != "", "Skipf called: %q", rec.skip)
			if tt.wantFatal || tt.wantSkip {
				assert.Contains(t, msg, tt.wantReason)
				assert.Contains(t, msg, "apt-get install redis-server")
				assert.Contains(t, msg, "make test")
			}
		})
	}
}

// TestServerRestart takes a server down in each way a test can and checks
// that clients fail while it is down and work again after Restart, on the
// same port and with an empty data set.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		down func(*Server)
	}{
		{"Kill", (*Server).Kill},
		{"Stop", (*Server).Stop},
		{"Kill twice", func(s *Server) { s.Kill(); s.Kill() }},
		{"Stop after Kill", func(s *Server) { s.Kill(); s.Stop() }},
		{"running", nil}, // Restart must stop the running process itself
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := StartServer(t)
			c := s.Client(t)
			addr, port := s.Addr, s.Port
			require.Equal(t, "127.0.0.1:"+strconv.Itoa(port), addr)
			require.True(t, s.Running())
			require.NoError(t, c.Set(ctx, "k", "before", 0).Err())
			got, err := c.Get(ctx, "k").Result()
			require.NoError(t, err)
			require.Equal(t, "before", got)

			if tt.down != nil {
				tt.down(s)
				require.False(t, s.Running())
				fast := redis.NewClient(failFast(s.Options()))
				defer fast.Close()
				err := fast.Get(ctx, "k").Err()
				require.Error(t, err)
				require.NotErrorIs(t, err, redis.Nil, "a server that is down cannot say the key is missing")
			}

			pid := s.proc.cmd.Process.Pid
			s.Restart(t)
			require.True(t, s.Running())
			assert.NotEqual(t, pid, s.proc.cmd.Process.Pid, "a new process")
			assert.Equal(t, addr, s.Addr)
			assert.Equal(t, port, s.Port)
			require.ErrorIs(t, c.Get(ctx, "k").Err(), redis.Nil, "persistence is off")
			require.NoError(t, c.Set(ctx, "k", "after", 0).Err())
			got, err = c.Get(ctx, "k").Result()
			require.NoError(t, err)
			require.Equal(t, "after", got)
			assert.Equal(t, 2, strings.Count(s.Log(), "Ready to accept connections"),
				"the log keeps the output of both processes")
		})
	}
}

func TestStartServerArgs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t, "--maxmemory", "1mb", "--save", "3600 1")
	c := s.Client(t)
	got, err := c.ConfigGet(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, "1048576", got["maxmemory"], "extra argument applied")
	assert.Equal(t, "3600 1", got["save"], "extra argument overrides a default")
	assert.Equal(t, "no", got["appendonly"])
	assert.Equal(t, "127.0.0.1", got["bind"])
}

func TestFlushAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := StartServer(t)
	c := s.Client(t)
	require.NoError(t, c.MSet(ctx, "a", 1, "b", 2).Err())
	s.FlushAll(t)
	n, err := c.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// TestStartPortTaken checks that a start on a port another server holds is
// reported as errAddrInUse, which StartServer retries on, even though the
// other server answers PING on that port.
func TestStartPortTaken(t *testing.T) {
	t.Parallel()
	other := StartServer(t)
	dir := t.TempDir()
	s := &Server{
		Addr:    other.Addr,
		Port:    other.Port,
		tb:      t,
		bin:     other.bin,
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
		args:    []string{"--port", strconv.Itoa(other.Port), "--bind", "127.0.0.1", "--save", "", "--dir", dir},
	}
	s.mu.Lock()
	err := s.start()
	s.mu.Unlock()
	require.ErrorIs(t, err, errAddrInUse)
	assert.False(t, s.Running())
	assert.True(t, other.Running())
}

// TestCleanup checks that when a test ends its server is gone, not even
// left as a zombie. Cluster nodes are Servers too, cleaned up the same
// way; TestMain checks that no client goroutines are left.
func TestCleanup(t *testing.T) {
	t.Parallel()
	var s *Server
	t.Run("inner", func(t *testing.T) {
		s = StartServer(t)
		require.NoError(t, s.Client(t).Ping(context.Background()).Err())
	})
	if s == nil {
		t.SkipNow() // the subtest skipped before starting a server
	}
	assert.False(t, s.Running())
	pid := s.proc.cmd.Process.Pid
	there, err := exists(pid)
	if errors.Is(err, errors.ErrUnsupported) {
		return
	}
	assert.False(t, there, "process %d still exists: %v", pid, err)
}

// TestLeakOptions shows why LeakOptions exists: a client that failed to
// dial PoolSize times leaves a goroutine behind for up to a second after
// Close. It is ignored by LeakOptions, and gone soon after.
func TestLeakOptions(t *testing.T) {
	// Not parallel, so that other tests' goroutines cannot come or go
	// while goleak looks; parallel tests wait until this one is done.
	ignore := goleak.IgnoreCurrent()
	s := StartServer(t)
	s.Kill()
	c := redis.NewClient(failFast(s.Options()))
	require.Error(t, c.Ping(context.Background()).Err())
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
	}, time.Second, time.Millisecond, "go-redis did not start its dial prober")
	require.NoError(t, c.Close())

	goleak.VerifyNone(t, append(LeakOptions(), ignore)...)
	require.Eventually(t, func() bool { return goleak.Find(ignore) == nil },
		3*time.Second, 50*time.Millisecond, "go-redis's dial prober outlived its client")
}

// failFast makes a client report a server that is down at once, where the
// defaults retry for more than a second.
func failFast(opt *redis.Options) *redis.Options {
	opt.PoolSize = 1 // so that one failed dial starts the pool's prober
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	return opt
}
