package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// server serves ok behind the middleware made of cfg, with lim as its
// Limiter.
func server(t *testing.T, lim *hybrid.Limiter, cfg httplimit.Config) *httptest.Server {
	t.Helper()
	cfg.Limiter = lim
	mw, err := httplimit.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	return srv
}

func localLimiter(t testing.TB, policies ...hybrid.Policy) *hybrid.Limiter {
	t.Helper()
	for i := range policies {
		policies[i].Mode = hybrid.Local
	}
	l, err := hybrid.New(hybrid.Config{Policies: policies})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func get(t *testing.T, srv *httptest.Server, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

var (
	policyItem = regexp.MustCompile(`"([^"]+)";q=(\d+);w=(\d+)`)
	limitItem  = regexp.MustCompile(`"([^"]+)";r=(\d+);t=(\d+)`)
)

// parse reads a RateLimit or RateLimit-Policy field back into numbers per
// policy name.
func parse(t *testing.T, re *regexp.Regexp, field string) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for _, m := range re.FindAllStringSubmatch(field, -1) {
		a, _ := strconv.ParseInt(m[2], 10, 64)
		b, _ := strconv.ParseInt(m[3], 10, 64)
		out[m[1]] = [2]int64{a, b}
	}
	require.NotEmpty(t, out, "field %q", field)
	return out
}

func TestHeadersAndRefusal(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "api", Prefix: "key:", Limit: 3, Window: time.Minute})
	srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "api", Key: httplimit.Header("X-API-Key"), Prefix: "key:", Window: time.Minute},
	}})
	for want := int64(2); want >= 0; want-- {
		resp := get(t, srv, "X-API-Key", "k1")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, [2]int64{3, 60}, parse(t, policyItem, resp.Header.Get("RateLimit-Policy"))["api"], "q=3;w=60")
		got := parse(t, limitItem, resp.Header.Get("RateLimit"))["api"]
		assert.Equal(t, want, got[0], "r counts down")
		assert.Positive(t, got[1], "t: seconds until the quota is whole again")
	}

	resp := get(t, srv, "X-API-Key", "k1")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	assert.InDelta(t, 20, retry, 1, "a token every 20 s")
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var body struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#quota-exceeded", body.Type)
	assert.Equal(t, 429, body.Status)
	assert.Equal(t, []string{"api"}, body.Violated)
	assert.Equal(t, int64(0), parse(t, limitItem, resp.Header.Get("RateLimit"))["api"][0])

	resp = get(t, srv)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "no key, not limited")
	resp = get(t, srv, "X-API-Key", "k2")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another key, its own quota")
}

// TestSeveralLimits checks that a request passes only if every limit
// admits it, and that one refusing takes nothing from the others.
func TestSeveralLimits(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "key", Prefix: "key:", Limit: 3, Window: time.Hour},
		hybrid.Policy{Name: "ip", Prefix: "ip:", Limit: 2, Window: time.Hour},
	)
	local := netip.MustParsePrefix("127.0.0.0/8")
	// Named after the policies: Prefix and Window come from them.
	srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "key", Key: httplimit.Header("X-API-Key")},
		{Name: "ip", Key: httplimit.IP(local)},
	}})
	from := func(ip string) int {
		return get(t, srv, "X-API-Key", "k", "X-Forwarded-For", ip).StatusCode
	}
	assert.Equal(t, 200, from("203.0.113.1"))
	resp := get(t, srv, "X-API-Key", "k", "X-Forwarded-For", "203.0.113.1")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, [2]int64{3, 3600}, parse(t, policyItem, resp.Header.Get("RateLimit-Policy"))["key"], "the policy's window")
	both := parse(t, limitItem, resp.Header.Get("RateLimit"))
	assert.Equal(t, int64(1), both["key"][0])
	assert.Equal(t, int64(0), both["ip"][0])
	assert.Equal(t, 429, from("203.0.113.1"), "the address's quota is spent")
	assert.Equal(t, 200, from("203.0.113.2"), "the key's last token was not taken by the refusal")
	assert.Equal(t, 429, from("203.0.113.3"), "now it is spent")
}

// TestSpoofedForwardedFor checks that X-Forwarded-For counts only from a
// trusted proxy: from anyone else, the peer address is the key.
func TestSpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "ip", Limit: 2, Window: time.Hour})
	untrusted := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "ip", Key: httplimit.IP(netip.MustParsePrefix("10.0.0.0/8")), Window: time.Hour},
	}})
	codes := []int{}
	for i := range 3 {
		codes = append(codes, get(t, untrusted, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)).StatusCode)
	}
	assert.Equal(t, []int{200, 200, 429}, codes, "every request is 127.0.0.1's, whatever it claims")

	lim2 := localLimiter(t, hybrid.Policy{Name: "ip", Limit: 2, Window: time.Hour})
	trusted := server(t, lim2, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "ip", Key: httplimit.IP(netip.MustParsePrefix("127.0.0.0/8")), Window: time.Hour},
	}})
	for i := range 3 {
		assert.Equal(t, 200, get(t, trusted, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)).StatusCode, "behind a trusted proxy, each client its own")
	}
}

func TestIPKey(t *testing.T) {
	t.Parallel()
	key := httplimit.IP(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48"))
	tests := []struct {
		name, remote string
		header       map[string]string
		want         string
	}{
		{"direct", "192.0.2.7:5555", nil, "192.0.2.7"},
		{"direct ignores headers", "192.0.2.7:5555", map[string]string{"X-Forwarded-For": "1.2.3.4"}, "192.0.2.7"},
		{"one trusted hop", "10.1.1.1:80", map[string]string{"X-Forwarded-For": "198.51.100.9"}, "198.51.100.9"},
		{"spoofed left of the real client", "10.1.1.1:80", map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.9, 10.2.2.2"}, "198.51.100.9"},
		{"Forwarded wins", "10.1.1.1:80", map[string]string{"Forwarded": `for="[2001:db8:cafe::17]:4711"`, "X-Forwarded-For": "1.1.1.1"}, "2001:db8:cafe::17"},
		{"Forwarded chain", "10.1.1.1:80", map[string]string{"Forwarded": "for=192.0.2.60;proto=http, for=10.9.9.9"}, "192.0.2.60"},
		{"garbage hop", "10.1.1.1:80", map[string]string{"X-Forwarded-For": "not-an-ip"}, "10.1.1.1"},
		{"v4 in v6", "[::ffff:192.0.2.8]:1", nil, "192.0.2.8"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remote
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		got, err := key(r)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got, tt.name)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "@unix"
	_, err := key(r)
	assert.ErrorIs(t, err, httplimit.ErrNoAddress)
}

func TestLegacyHeaders(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "api", Limit: 10, Window: time.Minute})
	srv := server(t, lim, httplimit.Config{Headers: httplimit.LegacyHeaders, Limits: []httplimit.Limit{
		{Name: "api", Key: httplimit.Header("X-API-Key"), Window: time.Minute},
	}})
	resp := get(t, srv, "X-API-Key", "k")
	assert.Equal(t, "10", resp.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "9", resp.Header.Get("X-RateLimit-Remaining"))
	reset, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, time.Now().Unix()+6, reset, 2, "epoch seconds: a token back in 6 s")
	assert.Empty(t, resp.Header.Get("RateLimit"))
}

// TestBothHeadersTightest sends both sets of fields for two limits: the
// draft's list both, the legacy fields the one with least left, here the
// second.
func TestBothHeadersTightest(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "key", Prefix: "key:", Limit: 10, Window: time.Minute},
		hybrid.Policy{Name: "ip", Prefix: "ip:", Limit: 4, Window: time.Hour},
	)
	srv := server(t, lim, httplimit.Config{Headers: httplimit.BothHeaders, Limits: []httplimit.Limit{
		{Name: "key", Key: httplimit.Header("X-API-Key")},
		{Name: "ip", Key: httplimit.IP()},
	}})
	resp := get(t, srv, "X-API-Key", "k")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Limit"), "the ip limit, with 3 left against the key's 9")
	assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Remaining"))
	both := parse(t, limitItem, resp.Header.Get("RateLimit"))
	assert.Equal(t, int64(9), both["key"][0])
	assert.Equal(t, int64(3), both["ip"][0])
	assert.Equal(t, [2]int64{4, 3600}, parse(t, policyItem, resp.Header.Get("RateLimit-Policy"))["ip"])
}

// down is a fleet that cannot be reached.
type down struct{}

func (down) Sync(context.Context, *global.Request) (*global.Response, error) {
	return nil, fmt.Errorf("dial: %w", global.ErrUnreachable)
}

// TestUnavailableWhenDegraded checks the 503 a cut-off node may answer
// with instead of 429.
func TestUnavailableWhenDegraded(t *testing.T) {
	t.Parallel()
	lim, err := hybrid.New(hybrid.Config{Syncer: down{}, ManualSync: true, Policies: []hybrid.Policy{
		{Name: "api", Limit: 100, Window: time.Second, OnUnreachable: hybrid.FailClosed},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	srv := server(t, lim, httplimit.Config{UnavailableWhenDegraded: true, Limits: []httplimit.Limit{
		{Name: "api", Key: httplimit.Header("X-API-Key"), Window: time.Second},
	}})
	assert.Equal(t, 200, get(t, srv, "X-API-Key", "k").StatusCode, "a new key's starter credit")
	require.Error(t, lim.SyncOnce(context.Background()))
	resp := get(t, srv, "X-API-Key", "k")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var body struct{ Type string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity", body.Type)

	// A healthy Limiter's refusal is the client's quota: 429, option or not.
	healthy := localLimiter(t, hybrid.Policy{Name: "api", Limit: 1, Window: time.Minute})
	srv = server(t, healthy, httplimit.Config{UnavailableWhenDegraded: true, Limits: []httplimit.Limit{
		{Name: "api", Key: httplimit.Header("X-API-Key")},
	}})
	assert.Equal(t, 200, get(t, srv, "X-API-Key", "k").StatusCode)
	assert.Equal(t, http.StatusTooManyRequests, get(t, srv, "X-API-Key", "k").StatusCode)
}

// TestRefusalsBookNothing checks Local policies: a sliding window refuses
// with 429 (it cannot book a future slot, and is not asked to), and a
// token bucket's refusals take nothing, so Retry-After does not grow with
// them.
func TestRefusalsBookNothing(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "sw", Prefix: "sw:", Algorithm: local.SlidingWindow, Limit: 2, Window: time.Minute},
		hybrid.Policy{Name: "tb", Prefix: "tb:", Limit: 2, Window: time.Minute},
	)
	srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "sw", Key: httplimit.Header("X-SW")},
		{Name: "tb", Key: httplimit.Header("X-TB")},
	}})
	codes := []int{}
	for range 3 {
		codes = append(codes, get(t, srv, "X-SW", "k").StatusCode)
	}
	assert.Equal(t, []int{200, 200, 429}, codes, "a Local sliding window")

	for range 2 {
		require.Equal(t, 200, get(t, srv, "X-TB", "k").StatusCode)
	}
	var retry []int
	for range 50 {
		resp := get(t, srv, "X-TB", "k")
		require.Equal(t, 429, resp.StatusCode)
		n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err)
		retry = append(retry, n)
	}
	assert.LessOrEqual(t, retry[len(retry)-1], 30, "a token every 30 s, however many were refused: %v", retry[:5])
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "api", Limit: 1, Window: time.Second})
	key := httplimit.Header("X")
	tests := map[string]httplimit.Config{
		"Config.Limiter":              {Limits: []httplimit.Limit{{Name: "a", Key: key, Window: time.Second}}},
		"Config.Limits is empty":      {Limiter: lim},
		"Config.Headers":              {Limiter: lim, Headers: 9, Limits: []httplimit.Limit{{Name: "a", Key: key, Window: time.Second}}},
		"Limits[0]: Name":             {Limiter: lim, Limits: []httplimit.Limit{{Name: "a b", Key: key, Window: time.Second}}},
		`Limits[0] ("a"): Key`:        {Limiter: lim, Limits: []httplimit.Limit{{Name: "a", Window: time.Second}}},
		`Limits[0] ("a"): Window`:     {Limiter: lim, Limits: []httplimit.Limit{{Name: "a", Key: key}}},
		`Limits[1]: Name "a" is used`: {Limiter: lim, Limits: []httplimit.Limit{{Name: "a", Key: key, Window: time.Second}, {Name: "a", Key: key, Window: time.Second}}},
	}
	for want, cfg := range tests {
		_, err := httplimit.New(cfg)
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
}
