package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// BenchmarkMiddleware is the middleware's own cost per request, passed and
// refused, with each set of header fields, in front of a handler that does
// nothing. The prefix case names its keys with a Prefix, as real
// configurations do, which costs a key string per limit per request.
func BenchmarkMiddleware(b *testing.B) {
	for _, tc := range []struct {
		name    string
		headers httplimit.Headers
		limit   int64
		prefix  string
	}{
		{"pass/none", httplimit.NoHeaders, 1 << 40, ""},
		{"pass/draft", httplimit.DraftHeaders, 1 << 40, ""},
		{"pass/draft/prefix", httplimit.DraftHeaders, 1 << 40, "key:"},
		{"pass/both", httplimit.BothHeaders, 1 << 40, ""},
		{"refuse/draft", httplimit.DraftHeaders, 1, ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			lim := localLimiter(b, hybrid.Policy{Name: "api", Prefix: tc.prefix, Limit: tc.limit, Window: time.Hour})
			mw, err := httplimit.New(httplimit.Config{Limiter: lim, Headers: tc.headers, Limits: []httplimit.Limit{
				{Name: "api", Key: httplimit.Header("X-API-Key")},
			}})
			require.NoError(b, err)
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-API-Key", "k")
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
