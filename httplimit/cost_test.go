package httplimit_test

import (
	"context"
	"encoding/json"
	"io"
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

// upload sends body as a POST from tenant t1, with length as its
// Content-Length (-1: chunked) and deny, if not empty, as X-Deny.
func upload(t *testing.T, srv *httptest.Server, body string, length int64, deny string) *http.Response {
	t.Helper()
	// A bare Reader: NewRequest would read a strings.Reader's length.
	var r io.Reader = io.MultiReader(strings.NewReader(body))
	if length == 0 {
		r = http.NoBody
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL, r)
	require.NoError(t, err)
	req.ContentLength = length
	req.Header.Set("X-Tenant", "t1")
	if deny != "" {
		req.Header.Set("X-Deny", deny)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// TestNegativeCost prices uploads by r.ContentLength, which is -1 for a
// chunked upload, against a quota of 1,000 bytes, followed by a limit
// that refuses when asked to (X-Deny). Once the bytes are spent, a
// chunked upload must not pass, alone or refused by the later limit
// (whose refusal gives back what the earlier took: -1 must not become
// tokens), and nothing after it may either. Before the fix, a chunked
// upload passed a spent quota, and on a Hybrid key the give-back left
// the lease so full that a 1 MiB upload passed too.
func TestNegativeCost(t *testing.T) {
	t.Parallel()
	for _, mode := range []hybrid.Mode{hybrid.Local, hybrid.Hybrid} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pols := []hybrid.Policy{
				{Name: "bytes", Prefix: "bytes:", Mode: mode, Limit: 1000, Window: time.Hour},
				{Name: "deny", Prefix: "deny:", Mode: mode, Limit: 1, Window: time.Hour},
			}
			var lim *hybrid.Limiter
			if mode == hybrid.Local {
				lim = localLimiter(t, pols...)
			} else {
				lim = redisLimiter(t, pols...)
			}
			srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{
				{Name: "bytes", Key: httplimit.Header("X-Tenant"), Cost: func(r *http.Request) int { return int(r.ContentLength) }},
				{Name: "deny", Key: httplimit.Header("X-Deny")},
			}})
			// Spend the bytes; a Hybrid node syncs when refused, to lease
			// what the fleet has, and ends holding a live, spent lease.
			admitted := 0
			for range 40 {
				if upload(t, srv, strings.Repeat("x", 100), 100, "").StatusCode == 200 {
					admitted += 100
					continue
				}
				if admitted >= 1000 {
					break
				}
				if mode == hybrid.Hybrid {
					require.NoError(t, lim.SyncOnce(context.Background()))
				}
			}
			require.Equal(t, 1000, admitted)
			require.Equal(t, 200, upload(t, srv, "", 0, "d").StatusCode, "spends deny:d")

			resp := upload(t, srv, "chunked", -1, "")
			assert.Equal(t, http.StatusLengthRequired, resp.StatusCode, "a chunked upload")
			var body struct{ Type, Detail string }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			assert.Equal(t, "about:blank", body.Type)
			assert.Contains(t, body.Detail, `"bytes"`)
			assert.Equal(t, http.StatusLengthRequired, upload(t, srv, "chunked", -1, "d").StatusCode, "a chunked upload the later limit would refuse")
			assert.NotEqual(t, 200, upload(t, srv, strings.Repeat("x", 1<<20), 1<<20, "").StatusCode, "1 MiB against a spent 1,000 bytes")
			assert.Equal(t, 429, upload(t, srv, strings.Repeat("x", 100), 100, "").StatusCode, "still spent")
		})
	}
}

// TestNegativeCostNotALength checks a negative cost on a request that
// declared its length: the Cost function is at fault, a 500, and the
// error reaches the log.
func TestNegativeCostNotALength(t *testing.T) {
	t.Parallel()
	lim := localLimiter(t, hybrid.Policy{Name: "api", Limit: 10, Window: time.Hour})
	var log strings.Builder
	srv := server(t, lim, httplimit.Config{ErrorLog: logTo(&log), Limits: []httplimit.Limit{
		{Name: "api", Key: httplimit.Header("X-Tenant"), Cost: func(*http.Request) int { return -5 }},
	}})
	resp := upload(t, srv, "x", 1, "")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	assert.NotContains(t, string(b), "-5", "no internals in the body")
	assert.Contains(t, log.String(), `limit "api": httplimit: Limit.Cost returned a negative cost (-5)`)
}

// TestCostAboveCapacity checks a request no wait can admit: 413 with a
// body that says so and no Retry-After, Local and Hybrid alike; a cost
// the policy can hold is still a 429.
func TestCostAboveCapacity(t *testing.T) {
	t.Parallel()
	for _, mode := range []hybrid.Mode{hybrid.Local, hybrid.Hybrid} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			p := hybrid.Policy{Name: "bytes", Mode: mode, Limit: 100, Window: time.Hour}
			var lim *hybrid.Limiter
			if mode == hybrid.Local {
				lim = localLimiter(t, p)
			} else {
				lim = redisLimiter(t, p)
			}
			srv := server(t, lim, httplimit.Config{UnavailableWhenDegraded: true, Limits: []httplimit.Limit{
				{Name: "bytes", Key: httplimit.Header("X-Tenant"), Cost: func(r *http.Request) int { return int(r.ContentLength) }},
			}})
			resp := upload(t, srv, strings.Repeat("x", 101), 101, "")
			require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
			assert.Empty(t, resp.Header.Get("Retry-After"), "no wait helps")
			var body struct {
				Detail   string
				Violated []string `json:"violated-policies"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			assert.Contains(t, body.Detail, "never")
			assert.Equal(t, []string{"bytes"}, body.Violated)
		})
	}
}
