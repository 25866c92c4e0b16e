package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/admin"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/rules"
)

const start = `
defaults: {mode: local, window: 1h}
rules:
  - {name: per-ip, key: [ip], limit: 3}
`

// serve starts the rules API and the check endpoint on a loopback
// server, with a token as the authorization, and returns its URL and
// the documents OnChange was given.
func serve(t *testing.T) (string, func() []string) {
	t.Helper()
	set, err := rules.Parse("start.yaml", []byte(start))
	require.NoError(t, err)
	l, err := hybrid.New(hybrid.Config{Policies: set.Policies()})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	rl, err := rules.New(l, set)
	require.NoError(t, err)
	var mu sync.Mutex
	var changes []string
	api, err := admin.New(admin.Config{
		Rules: rl,
		Authorize: func(r *http.Request) error {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				return errors.New("a bearer token is required")
			}
			return nil
		},
		OnChange: func(doc []byte) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, string(doc))
		},
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/admin/", api)
	mux.Handle("/v1/check", admin.Check(rl))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), changes...)
	}
}

// call sends method to url with body and headers (name, value, ...),
// the token set, and returns the status, the ETag and the body.
func call(t *testing.T, method, url, body string, headers ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer s3cret")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("ETag"), string(b)
}

// check posts a check request and decodes the answer, which must be 200.
func check(t *testing.T, url, body string) admin.CheckResponse {
	t.Helper()
	status, _, b := call(t, "POST", url+"/v1/check", body)
	require.Equal(t, http.StatusOK, status, b)
	var out admin.CheckResponse
	require.NoError(t, json.Unmarshal([]byte(b), &out))
	return out
}

func TestNewRefusesNoAuthorize(t *testing.T) {
	t.Parallel()
	_, err := admin.New(admin.Config{Rules: &rules.Limiter{}})
	assert.ErrorContains(t, err, "Authorize is nil")
	_, err = admin.New(admin.Config{Authorize: func(*http.Request) error { return nil }})
	assert.ErrorContains(t, err, "Rules is nil")
}

// TestAuthorize: every route of the API asks Authorize first.
func TestAuthorize(t *testing.T) {
	t.Parallel()
	url, changes := serve(t)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/admin/v1/rules", ""},
		{"GET", "/admin/v1/rules/per-ip", ""},
		{"PUT", "/admin/v1/rules/x", `{"key": ["ip"], "limit": 1, "window": "1s", "mode": "local"}`},
		{"DELETE", "/admin/v1/rules/per-ip", ""},
		{"PUT", "/admin/v1/load_factor", `{"load_factor": 0.5}`},
	} {
		req, err := http.NewRequest(r.method, url+r.path, strings.NewReader(r.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer guess")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", r.method, r.path)
	}
	assert.Empty(t, changes())
}

// TestRulesAPI: rules read, created, replaced and deleted through the
// API are in force at once; a bad change is a 400 naming the field,
// and a change made against an old ETag a 412, neither applied.
func TestRulesAPI(t *testing.T) {
	t.Parallel()
	url, changes := serve(t)
	status, tag, body := call(t, "GET", url+"/admin/v1/rules", "")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"name":"per-ip"`)
	require.NotEmpty(t, tag)

	status, _, body = call(t, "PUT", url+"/admin/v1/rules/api", `{"key": ["tenant"], "default_tier": "free",
		"tiers": {"free": {"limit": 2}, "pro": {"limit": 5}}}`, "If-Match", tag)
	require.Equal(t, http.StatusCreated, status, body)
	assert.Equal(t, int64(2), check(t, url, `{"tenant": "acme"}`).Limit, "in force at once")
	assert.Equal(t, "api/pro", check(t, url, `{"tenant": "initech", "tier": "pro"}`).Policy)

	status, _, body = call(t, "PUT", url+"/admin/v1/rules/api", `{"key": ["tenant"], "limit": 1}`, "If-Match", tag)
	assert.Equal(t, http.StatusPreconditionFailed, status, body)

	status, now, _ := call(t, "GET", url+"/admin/v1/rules/api", "")
	require.Equal(t, http.StatusOK, status)
	status, _, body = call(t, "PUT", url+"/admin/v1/rules/api", `{"key": ["tenant"], "limit": -5}`, "If-Match", now)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `rules[1] (\"api\"): Limit is -5`, "the field is named")
	_, after, _ := call(t, "GET", url+"/admin/v1/rules", "")
	assert.Equal(t, now, after, "nothing applied")

	status, _, body = call(t, "PUT", url+"/admin/v1/rules/api", `{"name": "other", "key": ["tenant"], "limit": 1}`)
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, _, _ = call(t, "PUT", url+"/admin/v1/rules/api", `{"key": ["tenant"]`)
	assert.Equal(t, http.StatusBadRequest, status, "broken JSON")
	status, _, _ = call(t, "PUT", url+"/admin/v1/rules/api", `{} {}`)
	assert.Equal(t, http.StatusBadRequest, status, "two values")

	status, _, _ = call(t, "DELETE", url+"/admin/v1/rules/api", "")
	assert.Equal(t, http.StatusOK, status)
	assert.Empty(t, check(t, url, `{"tenant": "acme"}`).Policy, "no rule applies")
	status, _, _ = call(t, "DELETE", url+"/admin/v1/rules/api", "")
	assert.Equal(t, http.StatusNotFound, status)
	status, _, _ = call(t, "GET", url+"/admin/v1/rules/api", "")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Len(t, changes(), 2, "one document per change applied")
}

// TestLoadFactorAPI: the load factor set through the API scales every
// rule at once; one out of range is a 400.
func TestLoadFactorAPI(t *testing.T) {
	t.Parallel()
	url, _ := serve(t)
	status, _, body := call(t, "PUT", url+"/admin/v1/load_factor", `{"load_factor": 2}`)
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, _, body = call(t, "PUT", url+"/admin/v1/load_factor", `{}`)
	assert.Equal(t, http.StatusBadRequest, status, body)
	status, _, body = call(t, "PUT", url+"/admin/v1/load_factor", `{"load_factor": 0.34}`)
	require.Equal(t, http.StatusOK, status, body)
	got := check(t, url, `{"ip": "192.0.2.1"}`)
	assert.Equal(t, int64(1), got.Limit, "3 x 0.34")
}

// TestCheck: the rate check answers 200 whether allowed or not, and
// refuses what is not a check request.
func TestCheck(t *testing.T) {
	t.Parallel()
	url, _ := serve(t)
	for i := range 3 {
		got := check(t, url, `{"ip": "192.0.2.9"}`)
		assert.True(t, got.Allowed)
		assert.Equal(t, int64(2-i), got.Remaining)
		assert.Equal(t, "per-ip", got.Policy)
	}
	got := check(t, url, `{"ip": "192.0.2.9"}`)
	assert.False(t, got.Allowed)
	assert.Positive(t, got.RetryAfter)
	got = check(t, url, `{"ip": "192.0.2.10", "hits": 4}`)
	assert.Equal(t, -1.0, got.RetryAfter, "more than the limit holds: never")
	got = check(t, url, `{"ip": "192.0.2.10", "hits": 0}`)
	assert.True(t, got.Allowed)
	assert.Equal(t, int64(3), got.Remaining, "a cost of 0 takes nothing")

	long := `{"ip": "` + strings.Repeat("x", 5000) + `"}`
	assert.True(t, check(t, url, long).Allowed, "a long part is limited like any other, not a 400 a gateway may let through")
	for _, bad := range []string{`{"ip": "x", "hits": -1}`, `{"ip": "x", "hits": 1e12}`, `[1]`, `{"ip": 5}`, ``} {
		status, _, body := call(t, "POST", url+"/v1/check", bad)
		assert.Equal(t, http.StatusBadRequest, status, "%.40s: %s", bad, body)
	}
	status, _, _ := call(t, "GET", url+"/v1/check", "")
	assert.Equal(t, http.StatusMethodNotAllowed, status)
}

// TestAPIWithStore: with a Store (a real Redis), a change through one
// node's API is saved there and followed by another node; the ETag is
// the store's version.
func TestAPIWithStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	node := func() (*rules.Limiter, *global.Document) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: c})
		require.NoError(t, err)
		set, err := rules.Parse("start.yaml", []byte(start))
		require.NoError(t, err)
		l, err := hybrid.New(hybrid.Config{Policies: set.Policies()})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		rl, err := rules.New(l, set)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		store := r.Document("rules")
		go func() { _ = rl.Follow(ctx, store, 10*time.Millisecond, nil) }()
		return rl, store
	}
	a, store := node()
	b, _ := node()
	require.Eventually(t, func() bool { return a.Version() > 0 && b.Version() == a.Version() }, 5*time.Second, 5*time.Millisecond)
	api, err := admin.New(admin.Config{Rules: a, Store: store, Authorize: func(*http.Request) error { return nil }})
	require.NoError(t, err)
	srvA := httptest.NewServer(api)
	defer srvA.Close()
	seed := a.Version()
	etag := func(v uint64) string { return fmt.Sprintf(`"v%d"`, v) }
	status, tag, _ := call(t, "GET", srvA.URL+"/admin/v1/rules", "")
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, etag(seed), tag)
	status, tag, body := call(t, "PUT", srvA.URL+"/admin/v1/rules/per-ip", `{"key": ["ip"], "limit": 9, "mode": "local", "window": "1h"}`, "If-Match", etag(seed))
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, etag(seed+1), tag)
	require.Eventually(t, func() bool { return b.Rules().Policies()[0].Limit == 9 }, time.Second, 5*time.Millisecond, "followed by the other node")
	status, _, _ = call(t, "PUT", srvA.URL+"/admin/v1/rules/per-ip", `{"key": ["ip"], "limit": 8, "mode": "local", "window": "1h"}`, "If-Match", etag(seed))
	assert.Equal(t, http.StatusPreconditionFailed, status)
	_, err = store.Save(context.Background(), b.Rules().Source(), seed+1) // another node's change
	require.NoError(t, err)
	status, tag, body = call(t, "PUT", srvA.URL+"/admin/v1/load_factor", `{"load_factor": 0.5}`)
	assert.Equal(t, http.StatusOK, status, "made to the latest version, not the one a held: %s", body)
	assert.Equal(t, etag(seed+3), tag)
}

// TestAPIShapes: a rule whose tiers are named by numbers, and numbers
// in a body, come back as JSON of the same shape, never a status with
// an empty body.
func TestAPIShapes(t *testing.T) {
	t.Parallel()
	url, _ := serve(t)
	status, _, body := call(t, "PUT", url+"/admin/v1/rules/num", `{"key": ["tenant"], "mode": "local", "window": "1h", "default_tier": "1",
		"tiers": {"1": {"limit": 4}, "2": {"limit": 5}}}`)
	require.Equal(t, http.StatusCreated, status, body)
	assert.Contains(t, body, `"limit":4`, "a number, not a string")
	status, _, body = call(t, "GET", url+"/admin/v1/rules/num", "")
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"1":{"limit":4}`)
}
