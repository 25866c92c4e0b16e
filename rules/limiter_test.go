package rules_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/rules"
)

// newLimiter parses file and returns a Limiter deciding by its rules
// (Local-mode rules: no fleet needed).
func newLimiter(t *testing.T, file string) *rules.Limiter {
	t.Helper()
	s, err := rules.Parse("test.yaml", []byte(file))
	require.NoError(t, err)
	l, err := hybrid.New(hybrid.Config{Policies: s.Policies()})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	r, err := rules.New(l, s)
	require.NoError(t, err)
	return r
}

// admitted offers req n times and counts what was admitted.
func admitted(t *testing.T, r *rules.Limiter, req rules.Request, n int) int {
	t.Helper()
	got := 0
	for range n {
		v, err := r.Allow(req)
		require.NoError(t, err)
		if v.Allowed() {
			got++
		}
	}
	return got
}

const tiered = `
defaults: {mode: local, window: 1h}
rules:
  - name: per-ip
    key: [ip]
    limit: 3
  - name: api
    key: [tenant]
    endpoints: ["/api/*", "POST /upload"]
    default_tier: free
    tiers:
      free: {limit: 5}
      pro:  {limit: 50}
`

// TestAllowRules: a request is limited by every rule that applies to it:
// the tier picks the limit, endpoints pick the rules, and an empty part
// leaves a rule out.
func TestAllowRules(t *testing.T) {
	t.Parallel()
	r := newLimiter(t, tiered)
	// Only per-ip applies off the API.
	assert.Equal(t, 3, admitted(t, r, rules.Request{IP: "192.0.2.1", Tenant: "acme", Endpoint: "GET /health"}, 10))
	// A free tenant from many addresses: its tier's 5.
	for i := range 10 {
		v, err := r.Allow(rules.Request{IP: string(rune('a' + i)), Tenant: "acme", Endpoint: "GET /api/users"})
		require.NoError(t, err)
		assert.Equal(t, i < 5, v.Allowed(), "request %d", i)
		if !v.Allowed() {
			assert.Equal(t, "api/free", v.Policy, "the refusing rule is named")
		}
	}
	// An unknown tier takes the default; pro its own.
	assert.Equal(t, 5, admitted(t, r, rules.Request{Tenant: "globex", Tier: "gold", Endpoint: "/api/x"}, 10), "no IP: per-ip is left out")
	assert.Equal(t, 10, admitted(t, r, rules.Request{Tenant: "initech", Tier: "pro", Endpoint: "/api/x"}, 10))
	// A method-qualified endpoint matches that method alone.
	assert.Equal(t, 5, admitted(t, r, rules.Request{Tenant: "umbrella", Endpoint: "POST /upload"}, 10))
	assert.Equal(t, 10, admitted(t, r, rules.Request{Tenant: "hooli", Endpoint: "PUT /upload"}, 10), "no rule applies")
	v, err := r.Allow(rules.Request{Endpoint: "PUT /upload"})
	require.NoError(t, err)
	assert.True(t, v.Allowed())
	assert.Empty(t, v.Policy, "no rule applied")
}

// TestLoadFactors: a file's load factors, for every rule or one, scale
// their limits; a new file without them sets them back.
func TestLoadFactors(t *testing.T) {
	t.Parallel()
	r := newLimiter(t, `
load_factor: 0.5
defaults: {mode: local, window: 1h}
rules:
  - {name: a, key: [tenant], limit: 10}
  - {name: b, key: [ip], limit: 10, load_factor: 0.2}
`)
	assert.Equal(t, 5, admitted(t, r, rules.Request{Tenant: "t1"}, 20))
	assert.Equal(t, 2, admitted(t, r, rules.Request{IP: "i1"}, 20))
	s, err := rules.Parse("b.yaml", []byte("defaults: {mode: local, window: 1h}\nrules:\n  - {name: a, key: [tenant], limit: 10}\n"))
	require.NoError(t, err)
	require.NoError(t, r.Apply(s))
	assert.Equal(t, 10, admitted(t, r, rules.Request{Tenant: "t2"}, 20))
}

// TestAllowAllOrNothing: a refusal by one rule gives back what the others
// took. A tenant refused by its address's limit keeps its own tokens.
func TestAllowAllOrNothing(t *testing.T) {
	t.Parallel()
	r := newLimiter(t, tiered)
	req := rules.Request{IP: "192.0.2.9", Tenant: "acme", Endpoint: "/api/a"}
	assert.Equal(t, 3, admitted(t, r, req, 10), "per-ip refuses after 3")
	req.IP = "192.0.2.10"
	assert.Equal(t, 2, admitted(t, r, req, 10), "the tenant spent 3 of 5, not 10")
}

// TestKeyPartsDoNotCollide: parts are escaped, so that two requests whose
// parts join alike are two keys.
func TestKeyPartsDoNotCollide(t *testing.T) {
	t.Parallel()
	r := newLimiter(t, "rules:\n  - {name: r, mode: local, key: [tenant, endpoint], limit: 1, window: 1h}\n")
	for _, req := range []rules.Request{
		{Tenant: "a|b", Endpoint: "c"},
		{Tenant: "a", Endpoint: "b|c"},
		{Tenant: `a\`, Endpoint: "|c"},
		{Tenant: `a\|`, Endpoint: "c"},
	} {
		assert.Equal(t, 1, admitted(t, r, req, 3), "%+v has a key of its own", req)
	}
}

// TestApplyWhileRequestsFlow: rules renamed and changed while requests
// flow: no request fails for a policy that is neither old nor new, and
// the new limits hold once applied.
func TestApplyWhileRequestsFlow(t *testing.T) {
	t.Parallel()
	r := newLimiter(t, "rules:\n  - {name: a, mode: local, key: [tenant], limit: 1000000, window: 1h}\n")
	b, err := rules.Parse("b.yaml", []byte("rules:\n  - {name: b, mode: local, key: [tenant], limit: 1000000, window: 1h}\n"))
	require.NoError(t, err)
	a := r.Rules()
	var stop atomic.Bool
	var failures atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if _, err := r.Allow(rules.Request{Tenant: "t"}); err != nil {
					if failures.Add(1) == 1 {
						t.Log(err)
					}
				}
			}
		})
	}
	for i := range 200 {
		next := a
		if i%2 == 0 {
			next = b
		}
		require.NoError(t, r.Apply(next))
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, failures.Load(), "requests failed during Apply")
	assert.Same(t, a, r.Rules())
}

// TestWatch: a rules file changed on disk is applied; a broken one is
// refused and logged with its line, the rules in force staying; Watch
// stops with its context and leaves no goroutine.
func TestWatch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(s string) { require.NoError(t, os.WriteFile(path, []byte(s), 0o600)) }
	write("rules:\n  - {name: a, mode: local, key: [tenant], limit: 2, window: 1h}\n")
	s, err := rules.Load(path)
	require.NoError(t, err)
	l, err := hybrid.New(hybrid.Config{Policies: s.Policies()})
	require.NoError(t, err)
	defer l.Close()
	r, err := rules.New(l, s)
	require.NoError(t, err)

	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Watch(ctx, path, 5*time.Millisecond, logger) }()
	logged := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Contains(logs.Bytes(), []byte(s))
	}

	write("rules:\n  - {name: a, mode: local, key: [tenant], limit: 4, window: 1h}\n")
	require.Eventually(t, func() bool { return r.Rules().Policies()[0].Limit == 4 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return logged("rules file applied") }, 5*time.Second, 5*time.Millisecond)

	write("rules:\n  - {name: a, mode: local, key: [tenant], limit: -4, window: 1h}\n")
	// The watcher may read the file half written (WriteFile truncates it
	// first) and refuse that first, at another place: wait for the line.
	require.Eventually(t, func() bool { return logged("rules file refused") }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return logged("rules.yaml:2:5") }, 5*time.Second, 5*time.Millisecond, "the line is logged")
	assert.Equal(t, int64(4), r.Rules().Policies()[0].Limit, "the rules in force stay")
	assert.Equal(t, 4, admitted(t, r, rules.Request{Tenant: "t"}, 10))

	require.NoError(t, os.Remove(path))
	require.Eventually(t, func() bool { return logged("cannot read the rules file") }, 5*time.Second, 5*time.Millisecond)
	write("rules:\n  - {name: b, mode: local, key: [tenant], limit: 1, window: 1h}\n")
	require.Eventually(t, func() bool { return r.Rules().Policies()[0].Name == "b" }, 5*time.Second, 5*time.Millisecond)

	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
}

// lockedWriter serialises writes to w, for a log read while written.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestOtherPoliciesStay: policies the hybrid.Limiter had besides the
// rules' stay through New and Apply.
func TestOtherPoliciesStay(t *testing.T) {
	t.Parallel()
	own := hybrid.Policy{Name: "own", Prefix: "own:", Mode: hybrid.Local, Limit: 2, Window: time.Hour}
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{own}})
	require.NoError(t, err)
	defer l.Close()
	a, err := rules.Parse("a.yaml", []byte("rules:\n  - {name: a, mode: local, key: [tenant], limit: 1, window: 1h}\n"))
	require.NoError(t, err)
	r, err := rules.New(l, a)
	require.NoError(t, err)
	b, err := rules.Parse("b.yaml", []byte("rules:\n  - {name: b, mode: local, key: [tenant], limit: 1, window: 1h}\n"))
	require.NoError(t, err)
	require.NoError(t, r.Apply(b))
	var names []string
	for _, p := range l.Config().Policies {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"own", "b"}, names)
	n := 0
	for range 5 {
		if d, err := l.Allow("own:x"); err == nil && d.Allowed() {
			n++
		}
	}
	assert.Equal(t, 2, n)
}

// TestHostileRequests: requests shaped to get past a limit or to lock
// others out. A tenant refused by its own window takes nothing from a
// window every tenant shares behind it; a tier the rule does not list
// takes the default tier's bucket, not one of its own; a part too long to
// keep is hashed and limited, not refused as an error, and cannot be
// forged by a part that looks like a hash.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	r := newLimiter(t, `
defaults: {mode: local, window: 1h, algorithm: fixedwindow}
rules:
  - {name: shared, key: [endpoint], limit: 10}
  - {name: tenant, key: [tenant], limit: 1}
  - name: tiered
    key: [ip, tier]
    default_tier: free
    tiers: {free: {limit: 2}}
`)
	assert.Equal(t, 1, admitted(t, r, rules.Request{Tenant: "evil", Endpoint: "/x"}, 10))
	assert.Equal(t, 1, admitted(t, r, rules.Request{Tenant: "good", Endpoint: "/x"}, 1), "the shared window was not spent by refusals")

	n := 0
	for i := range 10 {
		v, err := r.Allow(rules.Request{IP: "192.0.2.1", Tier: fmt.Sprint("bogus", i)})
		require.NoError(t, err)
		if v.Allowed() {
			n++
		}
	}
	assert.Equal(t, 2, n, "unknown tiers share the default tier's bucket")

	long := strings.Repeat("x", 5000)
	v, err := r.Allow(rules.Request{Tenant: long})
	require.NoError(t, err, "a long part is hashed, not an error")
	assert.True(t, v.Allowed())
	v, err = r.Allow(rules.Request{Tenant: long})
	require.NoError(t, err)
	assert.False(t, v.Allowed(), "and limited")
	sum := sha256.Sum256([]byte(long))
	assert.Equal(t, 1, admitted(t, r, rules.Request{Tenant: "#" + hex.EncodeToString(sum[:])}, 1), "a part shaped like the hash is a key of its own")
}
