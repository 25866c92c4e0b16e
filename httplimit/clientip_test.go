package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
)

var (
	lbs    = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	viaXFF = httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: lbs}
)

func TestIPKey(t *testing.T) {
	t.Parallel()
	fwd := httplimit.ClientIP{Header: "Forwarded", Proxies: lbs}
	realIP := httplimit.ClientIP{Header: "X-Real-IP", Proxies: lbs}
	twoHops := httplimit.ClientIP{Header: "X-Forwarded-For", Hops: 2}
	mapped := httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}
	tests := []struct {
		name   string
		c      httplimit.ClientIP
		remote string
		header http.Header
		want   string // "" for ErrNoAddress
	}{
		{"direct", httplimit.ClientIP{}, "192.0.2.7:5555", nil, "192.0.2.7"},
		{"direct ignores headers", httplimit.ClientIP{}, "192.0.2.7:5555", http.Header{"X-Forwarded-For": {"1.2.3.4"}}, "192.0.2.7"},
		{"peer v4 in v6", httplimit.ClientIP{}, "[::ffff:192.0.2.8]:1", nil, "192.0.2.8"},
		{"peer zone dropped", httplimit.ClientIP{}, "[fe80::1%eth0]:1", nil, "fe80::1"},
		{"unix socket", httplimit.ClientIP{}, "@", nil, ""},

		{"untrusted peer ignores headers", viaXFF, "192.0.2.7:5555", http.Header{"X-Forwarded-For": {"1.2.3.4"}}, "192.0.2.7"},
		{"one trusted hop", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"198.51.100.9"}}, "198.51.100.9"},
		{"spoofed left of the real client", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.9, 10.2.2.2"}}, "198.51.100.9"},
		{"garbage left of the real client", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"junk, 198.51.100.9"}}, "198.51.100.9"},
		{"several lines", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"6.6.6.6", "198.51.100.9, 10.2.2.2"}}, "198.51.100.9"},
		{"v4 with a port", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"203.0.113.7:54321"}}, "203.0.113.7"},
		{"v6 bracketed with a port", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"[2001:db8::1]:443"}}, "2001:db8::1"},
		{"v6 bracketed", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"[2001:db8::1]"}}, "2001:db8::1"},
		{"v6 zone dropped", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"fe80::1%eth0"}}, "fe80::1"},
		{"v4-mapped unmapped", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"::ffff:203.0.113.9"}}, "203.0.113.9"},
		{"mapped proxy behind a v6 proxy", viaXFF, "[2001:db8:ffff::1]:80", http.Header{"X-Forwarded-For": {"198.51.100.9, ::ffff:10.2.2.2"}}, "198.51.100.9"},
		{"garbage hop stops at its proxy", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"198.51.100.9, not-an-ip"}}, "10.1.1.1"},
		{"unspecified is not a client", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"0.0.0.0"}}, "10.1.1.1"},
		{"bad port", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"[2001:db8::1]x"}}, "10.1.1.1"},
		{"every hop a proxy", viaXFF, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"10.3.3.3, 10.2.2.2"}}, "10.3.3.3"},
		{"no header from a proxy", viaXFF, "10.1.1.1:80", nil, "10.1.1.1"},
		{"a client's Forwarded is not read", viaXFF, "10.1.1.1:80", http.Header{"Forwarded": {"for=1.1.1.1"}, "X-Forwarded-For": {"198.51.100.9"}}, "198.51.100.9"},
		{"mapped proxy prefix", mapped, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"198.51.100.9"}}, "198.51.100.9"},

		{"Forwarded", fwd, "10.1.1.1:80", http.Header{"Forwarded": {`for="[2001:db8:cafe::17]:4711"`}, "X-Forwarded-For": {"1.1.1.1"}}, "2001:db8:cafe::17"},
		{"Forwarded chain", fwd, "10.1.1.1:80", http.Header{"Forwarded": {"for=192.0.2.60;proto=http, For=10.9.9.9;by=10.0.0.1"}}, "192.0.2.60"},
		{"Forwarded obfuscated", fwd, "10.1.1.1:80", http.Header{"Forwarded": {"for=192.0.2.60, for=_hidden"}}, "10.1.1.1"},
		{"Forwarded element without for", fwd, "10.1.1.1:80", http.Header{"Forwarded": {"for=192.0.2.60, proto=https"}}, "10.1.1.1"},

		{"single-address header", realIP, "10.1.1.1:80", http.Header{"X-Real-Ip": {"198.51.100.9"}}, "198.51.100.9"},
		{"single-address header from a client", realIP, "192.0.2.7:80", http.Header{"X-Real-Ip": {"198.51.100.9"}}, "192.0.2.7"},

		{"hops", twoHops, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.9, 203.0.113.1"}}, "198.51.100.9"},
		{"hops across lines", twoHops, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"198.51.100.9", "203.0.113.1"}}, "198.51.100.9"},
		{"fewer hops than proxies", twoHops, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"203.0.113.1"}}, ""},
		{"hops garbage", twoHops, "10.1.1.1:80", http.Header{"X-Forwarded-For": {"junk, 203.0.113.1"}}, ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr, r.Header = tt.remote, tt.header
		if r.Header == nil {
			r.Header = http.Header{}
		}
		got, err := ip(t, tt.c)(r)
		if tt.want == "" {
			assert.ErrorIs(t, err, httplimit.ErrNoAddress, tt.name)
			continue
		}
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got, tt.name)
	}
}

func TestClientIPErrors(t *testing.T) {
	t.Parallel()
	tests := map[string]httplimit.ClientIP{
		"Header is empty":           {Proxies: lbs},
		"Hops is set but Header":    {Hops: 1},
		`Header "X Forwarded"`:      {Header: "X Forwarded", Proxies: lbs},
		"Hops is -1":                {Header: "X-Forwarded-For", Hops: -1},
		`"X-Forwarded-For" needs`:   {Header: "X-Forwarded-For"},
		"Proxies[1] is not a valid": {Header: "X-Forwarded-For", Proxies: []netip.Prefix{lbs[0], {}}},
	}
	for want, c := range tests {
		_, err := httplimit.IP(c)
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
}

// TestClientPicksNoKey runs the middleware behind a proxy at 127.0.0.1
// that appends X-Forwarded-For, as nginx does: a client that rotates the
// Forwarded field it sends, or that reaches the server directly with its
// own X-Forwarded-For, still spends one quota.
func TestClientPicksNoKey(t *testing.T) {
	t.Parallel()
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		name   string
		c      httplimit.ClientIP
		header func(i int) []string
		want   []int
	}{
		{"rotating Forwarded behind an XFF proxy", httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: loopback},
			func(i int) []string {
				return []string{"X-Forwarded-For", "198.51.100.7", "Forwarded", fmt.Sprintf("for=192.0.2.%d", i)}
			}, []int{200, 200, 429}},
		{"rotating X-Forwarded-For from an untrusted peer", httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: lbs},
			func(i int) []string { return []string{"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)} }, []int{200, 200, 429}},
		{"distinct clients behind a trusted proxy", httplimit.ClientIP{Header: "X-Forwarded-For", Proxies: loopback},
			func(i int) []string { return []string{"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i)} }, []int{200, 200, 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lim := localLimiter(t, hybrid.Policy{Name: "ip", Limit: 2, Window: time.Hour})
			srv := server(t, lim, httplimit.Config{Limits: []httplimit.Limit{{Name: "ip", Key: ip(t, tt.c)}}})
			var codes []int
			for i := range 3 {
				codes = append(codes, get(t, srv, tt.header(i)...).StatusCode)
			}
			assert.Equal(t, tt.want, codes)
		})
	}
}

// FuzzClientIP checks that what a client writes to the left of the
// proxies' X-Forwarded-For entries, or in a Forwarded field the proxies
// do not set, never changes its key.
func FuzzClientIP(f *testing.F) {
	for _, s := range []string{"", "6.6.6.6", "[::1]:1, 10.0.0.1", "for=1.2.3.4", ",,", "\"", "[", "fe80::1%25eth0", "1.2.3.4:"} {
		f.Add(s, s)
	}
	key := ip(f, viaXFF)
	f.Fuzz(func(t *testing.T, left, forwarded string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.1.1.1:443"
		r.Header.Set("Forwarded", forwarded)
		r.Header.Set("X-Forwarded-For", strings.Join([]string{left, "198.51.100.9", "10.2.2.2:80"}, ", "))
		got, err := key(r)
		require.NoError(t, err)
		require.Equal(t, "198.51.100.9", got)
	})
}
