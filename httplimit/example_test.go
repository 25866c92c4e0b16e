package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Two limits on every request: 2 per minute per API key, and 100 per
// hour per client address behind a load balancer in 10.0.0.0/8.
func Example() {
	limiter, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{
		{Name: "key", Prefix: "key:", Mode: hybrid.Local, Limit: 2, Window: time.Minute},
		{Name: "ip", Prefix: "ip:", Mode: hybrid.Local, Limit: 100, Window: time.Hour},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close()
	limit, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits: []httplimit.Limit{
			// Named after the Limiter's policies: their Prefix and Window apply.
			{Name: "key", Key: httplimit.Header("X-API-Key")},
			{Name: "ip", Key: httplimit.IP(netip.MustParsePrefix("10.0.0.0/8"))},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello") }))

	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "key";r=1;t=30, "ip";r=99;t=36
	// 200 "key";r=0;t=60, "ip";r=98;t=72
	// 429 "key";r=0;t=60
}
