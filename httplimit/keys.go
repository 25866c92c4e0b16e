package httplimit

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// A KeyFunc names what a request is limited by: an API key, a user, a
// client address. An empty key exempts the request from that Limit (no
// API key header, say); an error fails the request with Config.OnError.
type KeyFunc func(r *http.Request) (string, error)

// Header keys requests by the value of header name, such as an API key;
// requests without it are not limited by this Limit.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) { return r.Header.Get(name), nil }
}

// ContextValue keys requests by the string an earlier middleware stored
// in the request's context under key, such as the authenticated user;
// requests without one are not limited by this Limit.
func ContextValue(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		s, _ := r.Context().Value(key).(string)
		return s, nil
	}
}

// ErrNoAddress is returned by IP's KeyFunc for a request whose peer
// address cannot be parsed.
var ErrNoAddress = errors.New("httplimit: the request's remote address is not an IP address")

// IP keys requests by the client's IP address. The client is the peer
// that connected, unless that peer is one of the trusted proxies: then
// the Forwarded header (RFC 7239), or else X-Forwarded-For, is read from
// the nearest hop outward, skipping trusted proxies, and the first
// address not trusted is the client. A client that is not behind a
// trusted proxy cannot choose its own key by sending those headers.
func IP(trusted ...netip.Prefix) KeyFunc {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return func(r *http.Request) (string, error) {
		peer, err := remoteAddr(r.RemoteAddr)
		if err != nil {
			return "", err
		}
		if !isTrusted(peer) {
			return peer.String(), nil
		}
		hops := forwarded(r.Header)
		client := peer
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(hops[i])
			if err != nil {
				break // an obfuscated or garbled hop: stop at the last one known
			}
			client = a.Unmap()
			if !isTrusted(client) {
				break
			}
		}
		return client.String(), nil
	}
}

func remoteAddr(s string) (netip.Addr, error) {
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, ErrNoAddress
	}
	return a.Unmap(), nil
}

// forwarded returns the addresses the proxies recorded, farthest first:
// Forwarded's for= parameters if there are any, else X-Forwarded-For.
func forwarded(h http.Header) []string {
	var hops []string
	for _, line := range h.Values("Forwarded") {
		for _, elem := range strings.Split(line, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(k, "for") {
					continue
				}
				hops = append(hops, forwardedNode(v))
			}
		}
	}
	if len(hops) > 0 {
		return hops
	}
	for _, line := range h.Values("X-Forwarded-For") {
		for _, a := range strings.Split(line, ",") {
			hops = append(hops, strings.TrimSpace(a))
		}
	}
	return hops
}

// forwardedNode strips a Forwarded node of its quotes, brackets and port:
// "[2001:db8::1]:4711" becomes 2001:db8::1.
func forwardedNode(v string) string {
	v = strings.Trim(strings.TrimSpace(v), `"`)
	if strings.HasPrefix(v, "[") {
		if end := strings.IndexByte(v, ']'); end > 0 {
			return v[1:end]
		}
	}
	if host, _, err := net.SplitHostPort(v); err == nil {
		return host
	}
	return v
}
