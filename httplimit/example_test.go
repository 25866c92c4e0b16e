package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
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
	// The load balancers append the client's address to X-Forwarded-For.
	clientIP, err := httplimit.IP(httplimit.ClientIP{
		Header:  "X-Forwarded-For",
		Proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	limit, err := httplimit.New(httplimit.Config{
		Limiter: limiter,
		Limits: []httplimit.Limit{
			// Named after the Limiter's policies: their Prefix and Window apply.
			{Name: "key", Key: httplimit.Header("X-API-Key")},
			{Name: "ip", Key: clientIP},
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

// Uploads limited by their size in bytes, and a chunked upload (whose
// length is unknown until it is read) charged the most the handler
// reads.
func ExampleLimit_uploadBytes() {
	limiter, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{
		{Name: "upload-bytes", Mode: hybrid.Local, Limit: 100 << 20, Window: time.Hour},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer limiter.Close()
	const maxUpload = 10 << 20
	limit, err := httplimit.New(httplimit.Config{Limiter: limiter, Limits: []httplimit.Limit{{
		Name: "upload-bytes", Key: httplimit.Header("X-API-Key"), HashKeys: true,
		Cost: func(r *http.Request) int {
			if r.ContentLength < 0 || r.ContentLength > maxUpload {
				return maxUpload // unknown length: charge the most the handler reads
			}
			return int(r.ContentLength)
		},
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	handler := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxUpload) // what the charge covers, and no more
		n, err := io.Copy(io.Discard, r.Body)
		fmt.Fprintln(w, n, err)
	}))

	r := httptest.NewRequest(http.MethodPost, "/", io.MultiReader(strings.NewReader("chunked body")))
	r.ContentLength = -1
	r.Header.Set("X-API-Key", "k1")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	left, _, _ := strings.Cut(w.Header().Get("RateLimit"), ";t=")
	fmt.Println(w.Code, left, strings.TrimSpace(w.Body.String()))
	// Output:
	// 200 "upload-bytes";r=94371840 12 <nil>
}

// docsHTTP is docs/http.md's first snippet, compiled.
func docsHTTP(limiter *hybrid.Limiter, loadBalancers []netip.Prefix, mux *http.ServeMux) {
	clientIP, err := httplimit.IP(httplimit.ClientIP{
		Header:  "X-Forwarded-For", // the one field your load balancers set
		Proxies: loadBalancers,     // and their addresses
	})
	if err != nil {
		log.Fatal(err) // names the field at fault
	}
	limit, err := httplimit.New(httplimit.Config{
		Limiter: limiter, // a *hybrid.Limiter with Policies "key:" and "ip:"
		Limits: []httplimit.Limit{ // named after the Limiter's policies, whose Prefix and Window they take
			{Name: "key", Key: httplimit.Header("X-API-Key"), HashKeys: true},
			{Name: "ip", Key: clientIP},
		},
	})
	if err != nil {
		log.Fatal(err) // names the field at fault, or a limit no policy matches
	}
	log.Fatal(http.ListenAndServe(":8080", limit(mux)))
}

// docsClientIP is docs/http.md's client address strategies, compiled.
func docsClientIP(loadBalancers, cloudflare []netip.Prefix) []httplimit.ClientIP {
	return []httplimit.ClientIP{
		{}, // no proxy: the peer that connected is the client
		{Header: "X-Forwarded-For", Proxies: loadBalancers}, // nginx, HAProxy, AWS ALB: each appends the address it was reached from
		{Header: "Forwarded", Proxies: loadBalancers},       // a proxy that writes RFC 7239's Forwarded: for=
		{Header: "X-Real-IP", Proxies: loadBalancers},       // nginx's proxy_set_header X-Real-IP $remote_addr
		{Header: "CF-Connecting-IP", Proxies: cloudflare},   // Cloudflare, with its published ranges
		{Header: "X-Forwarded-For", Hops: 2},                // Google Cloud's load balancer appends two addresses, client and its own
	}
}

var _ = []any{docsHTTP, docsClientIP}
