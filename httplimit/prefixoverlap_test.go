package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// TestLimitPrefixOverlap: a Limit with Prefix "" and one with Prefix
// "ip:" under one catch-all policy. The attacker at 198.51.100.9 sends
// X-User "ip:192.0.2.7", which is the key the "ip" limit gives the
// victim 192.0.2.7. Before the fix it spent the victim's address quota,
// since the foreign check knew policy Prefixes only, not other Limits';
// now such a key is the client's error.
func TestLimitPrefixOverlap(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "all", Limit: 2, Window: time.Hour})
	mw, err := httplimit.New(httplimit.Config{Limiter: lim, Limits: []httplimit.Limit{
		{Name: "user", Key: httplimit.Header("X-User"), Window: time.Hour},
		{Name: "ip", Prefix: "ip:", Key: ip(t, httplimit.ClientIP{}), Window: time.Hour},
	}})
	require.NoError(t, err)
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(remote, user string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		if user != "" {
			r.Header.Set("X-User", user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 2 {
		assert.Equal(t, http.StatusBadRequest, do("198.51.100.9:1", "ip:192.0.2.7"), "attacker request %d names another Limit's key", i)
	}
	assert.Equal(t, http.StatusOK, do("192.0.2.7:1", ""), "the victim's first request of the hour")
}

// TestKeyErrorUndoesEarlierLimits: a request that passes its first Limit
// and fails the second with a key error must not stay charged to the
// first: its tokens are given back, as for a refusal.
func TestKeyErrorUndoesEarlierLimits(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "a", Prefix: "a:", Limit: 2, Window: time.Hour},
		hybrid.Policy{Name: "b", Prefix: "b:", Limit: 2, Window: time.Hour})
	mw, err := httplimit.New(httplimit.Config{Limiter: lim, Limits: []httplimit.Limit{
		{Name: "a", Key: httplimit.Header("X-A")},
		{Name: "b", Key: httplimit.Header("X-B")},
	}})
	require.NoError(t, err)
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func(b string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-A", "tenant")
		r.Header.Set("X-B", b)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for range 3 {
		assert.Equal(t, http.StatusBadRequest, do(strings.Repeat("x", 1000)), "B's key is too long")
	}
	assert.Equal(t, http.StatusOK, do("1"), "A's tokens came back each time")
	assert.Equal(t, http.StatusOK, do("2"))
	assert.Equal(t, http.StatusTooManyRequests, do("3"))
}

// TestHashKeysPrefixReachable: a hashed key is a base64url digest after
// the Limit's Prefix, so with Prefix "" beside a policy "u", one key in
// 64 would be decided by that policy. New refuses the configuration;
// with a Prefix ending in ':' a digest reaches no other policy.
func TestHashKeysPrefixReachable(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t,
		hybrid.Policy{Name: "all", Limit: 2, Window: time.Hour},
		hybrid.Policy{Name: "users", Prefix: "u", Limit: 2, Window: time.Hour})
	_, err := httplimit.New(httplimit.Config{Limiter: lim, Limits: []httplimit.Limit{
		{Name: "all", Key: httplimit.Header("X-API-Key"), HashKeys: true},
	}})
	require.ErrorContains(t, err, `a hashed key may start with "u"`)
	lim = localLimiter(t,
		hybrid.Policy{Name: "all", Limit: 2, Window: time.Hour},
		hybrid.Policy{Name: "keys", Prefix: "key:", Limit: 2, Window: time.Hour},
		hybrid.Policy{Name: "ips", Prefix: "ip:", Limit: 2, Window: time.Hour})
	_, err = httplimit.New(httplimit.Config{Limiter: lim, Limits: []httplimit.Limit{
		{Name: "keys", Key: httplimit.Header("X-API-Key"), HashKeys: true},
	}})
	require.NoError(t, err)
}
