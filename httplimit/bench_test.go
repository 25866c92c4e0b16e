package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// BenchmarkMiddleware is the middleware's own cost per request, passed and
// refused, with each set of header fields, in front of a handler that does
// nothing. The prefix case names its keys with a Prefix, as real
// configurations do, which costs a key string per limit per request; the
// hashed case hashes the key (HashKeys), and the xff case keys by the
// client address behind two proxies.
func BenchmarkMiddleware(b *testing.B) {
	behind := ip(b, httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("10.0.0.0/8")}})
	for _, tc := range []struct {
		name    string
		headers httplimit.Headers
		limit   int64
		prefix  string
		key     httplimit.KeyFunc
		hash    bool
	}{
		{"pass/none", httplimit.NoHeaders, 1 << 40, "", nil, false},
		{"pass/draft", httplimit.DraftHeaders, 1 << 40, "", nil, false},
		{"pass/draft/prefix", httplimit.DraftHeaders, 1 << 40, "key:", nil, false},
		{"pass/draft/hashed", httplimit.DraftHeaders, 1 << 40, "key:", nil, true},
		{"pass/draft/xff", httplimit.DraftHeaders, 1 << 40, "", behind, false},
		{"pass/both", httplimit.BothHeaders, 1 << 40, "", nil, false},
		{"refuse/draft", httplimit.DraftHeaders, 1, "", nil, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := localLimiter(b, hybrid.Policy{Name: "api", Prefix: tc.prefix, Limit: tc.limit, Window: time.Hour})
			key := tc.key
			if key == nil {
				key = httplimit.Header("X-API-Key")
			}
			mw, err := httplimit.New(httplimit.Config{Limiter: lim, Headers: tc.headers, Limits: []httplimit.Limit{
				{Name: "api", Key: key, HashKeys: tc.hash},
			}})
			require.NoError(b, err)
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-API-Key", "k")
			req.Header.Set("X-Forwarded-For", "198.51.100.9, 10.2.2.2")
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
