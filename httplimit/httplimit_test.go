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

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
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

// redisLimiter is a Limiter whose policies are decided by a real Redis,
// synced only when the test calls SyncOnce.
func redisLimiter(t *testing.T, policies ...hybrid.Policy) *hybrid.Limiter {
	t.Helper()
	srv := redistest.StartServer(t)
	nodes, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t), Timeout: time.Second})
	require.NoError(t, err)
	l, err := hybrid.New(hybrid.Config{Syncer: nodes, ManualSync: true, Policies: policies})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// ip is IP(c), which must be valid.
func ip(t testing.TB, c httplimit.ClientIP) httplimit.KeyFunc {
	t.Helper()
	key, err := httplimit.IP(c)
	require.NoError(t, err)
	return key
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
		{Name: "ip", Key: ip(t, httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: []netip.Prefix{local}})},
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
		{Name: "ip", Key: ip(t, httplimit.ClientIP{})},
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

func (down) Sync(context.Context, *fleet.Request) (*fleet.Response, error) {
	return nil, fmt.Errorf("dial: %w", fleet.ErrUnreachable)
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
	lim := localLimiter(t, hybrid.Policy{Name: "api", Limit: 1, Window: time.Second}, hybrid.Policy{Name: "ip", Prefix: "ip:", Limit: 1, Window: time.Second})
	key := httplimit.Header("X")
	tests := map[string]httplimit.Config{
		"Config.Limiter":              {Limits: []httplimit.Limit{{Name: "a", Key: key, Window: time.Second}}},
		"Config.Limits is empty":      {Limiter: lim},
		"Config.Headers":              {Limiter: lim, Headers: 9, Limits: []httplimit.Limit{{Name: "a", Key: key, Window: time.Second}}},
		"Limits[0]: Name":             {Limiter: lim, Limits: []httplimit.Limit{{Name: "a b", Key: key, Window: time.Second}}},
		`Limits[0] ("a"): Key`:        {Limiter: lim, Limits: []httplimit.Limit{{Name: "a", Window: time.Second}}},
		`Limits[1]: Name "a" is used`: {Limiter: lim, Limits: []httplimit.Limit{{Name: "a", Key: key, Window: time.Second}, {Name: "a", Key: key, Window: time.Second}}},
		`Limits[1] ("b"): Prefix "ip:" is also Limits[0]'s`: {Limiter: lim, Limits: []httplimit.Limit{
			{Name: "a", Prefix: "ip:", Key: key}, {Name: "b", Prefix: "ip:", Key: key}}},
		`Limits[1] ("b"): Prefix "" is also Limits[0]'s`: {Limiter: lim, Limits: []httplimit.Limit{
			{Name: "api", Key: key}, {Name: "b", Key: key}}},
		`Limits[0] ("a"): Prefix "xxxxxxxxxx" and a hashed key`: {Limiter: localLimiterMaxKeyLen(t, 30), Limits: []httplimit.Limit{
			{Name: "a", Prefix: "xxxxxxxxxx", Key: key, HashKeys: true}}},
	}
	for want, cfg := range tests {
		_, err := httplimit.New(cfg)
		require.ErrorIs(t, err, httplimit.ErrInvalidConfig, want)
		assert.Contains(t, err.Error(), want)
	}
}

func localLimiterMaxKeyLen(t *testing.T, n int) *hybrid.Limiter {
	l, err := hybrid.New(hybrid.Config{MaxKeyLen: n, Policies: []hybrid.Policy{{Name: "all", Mode: hybrid.Local, Limit: 1, Window: time.Second}}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestPrefixWithoutPolicy puts the README's two snippets together: a
// Limiter with only an "api:" policy, and a Limit on "ip:". Every request
// would fail with "no policy matches the key"; New says so, naming the
// limit.
func TestPrefixWithoutPolicy(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "api", Prefix: "api:", Limit: 100, Window: time.Second})
	_, err := httplimit.New(httplimit.Config{Limiter: lim, Limits: []httplimit.Limit{
		{Name: "api", Prefix: "api:", Key: httplimit.Header("X-API-Key"), Window: time.Second},
		{Name: "ip", Prefix: "ip:", Key: ip(t, httplimit.ClientIP{}), Window: time.Minute},
	}})
	require.ErrorIs(t, err, hybrid.ErrNoPolicy)
	assert.Contains(t, err.Error(), `Config.Limits[1] ("ip"): no policy of the Limiter matches Prefix "ip:"`)

	// With Config.Resolve the Limiter picks policies by key, which New
	// cannot probe: it trusts Resolve.
	res, err := hybrid.New(hybrid.Config{Resolve: func(string) string { return "api" }, Policies: []hybrid.Policy{
		{Name: "api", Prefix: "api:", Mode: hybrid.Local, Limit: 1, Window: time.Minute},
	}})
	require.NoError(t, err)
	t.Cleanup(func() { res.Close() })
	srv := server(t, res, httplimit.Config{Limits: []httplimit.Limit{{Name: "api", Prefix: "other:", Key: httplimit.Header("X")}}})
	resp := get(t, srv, "X", "k")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, [2]int64{1, 60}, parse(t, policyItem, resp.Header.Get("RateLimit-Policy"))["api"], "the named policy's window")
}

// TestWindowFromPrefix checks that a Limit's window is that of the policy
// its Prefix reaches, which decides it, not that of a policy it is named
// after.
func TestWindowFromPrefix(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "api", Prefix: "api:", Limit: 10, Window: time.Minute},
		hybrid.Policy{Name: "slow", Prefix: "slow:", Limit: 10, Window: time.Hour},
	)
	srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{{Name: "api", Prefix: "slow:", Key: httplimit.Header("X")}}})
	assert.Equal(t, [2]int64{10, 3600}, parse(t, policyItem, get(t, srv, "X", "k").Header.Get("RateLimit-Policy"))["api"])
}

// TestForeignKey checks that a key cannot reach another policy by
// starting with the rest of its Prefix: with a catch-all tenant policy
// and an "ip:" one, X-Tenant "ip:127.0.0.1" would spend 127.0.0.1's
// address quota.
func TestForeignKey(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "tenant", Limit: 100, Window: time.Hour},
		hybrid.Policy{Name: "ip", Prefix: "ip:", Limit: 2, Window: time.Hour},
	)
	srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "tenant", Key: httplimit.Header("X-Tenant")},
		{Name: "ip", Key: ip(t, httplimit.ClientIP{})},
	}})
	for range 3 {
		assert.Equal(t, 400, get(t, srv, "X-Tenant", "ip:127.0.0.1").StatusCode)
	}
	assert.Equal(t, 200, get(t, srv).StatusCode, "127.0.0.1's quota is whole")
	assert.Equal(t, 200, get(t, srv, "X-Tenant", "iq:x").StatusCode)
}

// TestFirstResponse checks a new Hybrid key's first response, before any
// grant: it knows the limit, not what is left, so it sends the policy
// and no RateLimit item (not r=0;t=0, which reads as "back off"); once
// granted, both.
func TestFirstResponse(t *testing.T) {
	t.Parallel()
	lim := redisLimiter(t, hybrid.Policy{Name: "api", Limit: 100, Window: time.Minute})
	srv := server(t, lim, httplimit.Config{Headers: httplimit.BothHeaders, Limits: []httplimit.Limit{{Name: "api", Key: httplimit.Header("X-API-Key")}}})
	resp := get(t, srv, "X-API-Key", "new")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, [2]int64{100, 60}, parse(t, policyItem, resp.Header.Get("RateLimit-Policy"))["api"])
	assert.Empty(t, resp.Header.Get("RateLimit"))
	assert.Equal(t, "100", resp.Header.Get("X-RateLimit-Limit"))
	assert.Empty(t, resp.Header.Get("X-RateLimit-Remaining"))

	require.NoError(t, lim.SyncOnce(context.Background()))
	resp = get(t, srv, "X-API-Key", "new")
	require.Equal(t, 200, resp.StatusCode)
	got := parse(t, limitItem, resp.Header.Get("RateLimit"))["api"]
	assert.InDelta(t, 98, got[0], 1, "r: the fleet's remaining")
	assert.Positive(t, got[1], "t")
	assert.NotEmpty(t, resp.Header.Get("X-RateLimit-Remaining"))
}

// TestRefusalShowsGivenBack checks the fields of a request that a later
// limit refused: the earlier limit's token was given back, and its
// RateLimit item says so.
func TestRefusalShowsGivenBack(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "key", Prefix: "key:", Limit: 3, Window: time.Hour},
		hybrid.Policy{Name: "ip", Prefix: "ip:", Limit: 1, Window: time.Hour},
	)
	srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{
		{Name: "key", Key: httplimit.Header("X-API-Key")},
		{Name: "ip", Key: ip(t, httplimit.ClientIP{})},
	}})
	require.Equal(t, 200, get(t, srv, "X-API-Key", "k").StatusCode)
	resp := get(t, srv, "X-API-Key", "k")
	require.Equal(t, 429, resp.StatusCode)
	items := parse(t, limitItem, resp.Header.Get("RateLimit"))
	assert.Equal(t, int64(2), items["key"][0], "the key's token was given back")
	assert.Equal(t, int64(0), items["ip"][0])
}
