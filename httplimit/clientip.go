package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

// ErrNoAddress is returned by IP's KeyFunc for a request whose client
// address cannot be found: its peer address is not an IP address (a Unix
// socket), or, with ClientIP.Hops, the header holds fewer addresses than
// there are proxies.
var ErrNoAddress = errors.New("httplimit: the request's client address cannot be found")

// ClientIP says where IP finds a request's client address. Its zero value
// keys requests by the peer that connected, which is right for a server
// that clients reach directly.
//
// Behind proxies, name the one header field your proxies set, and the
// proxies. Only that field is read: a proxy that appends to
// X-Forwarded-For passes on whatever Forwarded or X-Real-IP field the
// client sent, so reading a field the proxy does not set would let every
// client pick its own key. The model is that of realclientip-go's
// strategies (rightmost untrusted address, trusted count, single-address
// header); docs/http.md says how to choose.
type ClientIP struct {
	// Header is the field your proxies write the client's address to:
	// "X-Forwarded-For" (nginx's $proxy_add_x_forwarded_for, HAProxy,
	// most cloud load balancers), "Forwarded" (RFC 7239), or a field
	// that holds one address, such as "X-Real-IP" or "CF-Connecting-IP".
	// Empty: no proxy; the peer is the client.
	Header string

	// Proxies are your proxies' addresses. Header is read only from a
	// request whose peer is in Proxies; any other peer is the client,
	// whatever it sends. Header's addresses are read from the right, the
	// nearest hop first, skipping those in Proxies: the first address
	// outside them is the client. An entry that is not an address (a
	// garbled or obfuscated one) ends the walk at the proxy that wrote it,
	// so that nothing a client writes picks its key. Required with Header
	// unless Hops is set.
	Proxies []netip.Prefix

	// Hops, if set, is how many proxies stand in front of the server,
	// each appending the address it was reached from to Header: the
	// client is the Hops-th address from the right. It is for proxies
	// whose addresses you cannot list, such as a cloud load balancer's.
	// With Proxies empty the peer is not checked, so the server must be
	// reachable only through the proxies: a client that reaches it
	// directly writes the header itself.
	Hops int
}

var fieldName = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

// IP keys requests by the client's IP address, found as c says: an
// IPv4-mapped IPv6 address as IPv4, without an IPv6 zone. It returns an
// error naming the field of c at fault.
//
// Each IPv6 address is its own key: key by prefix in your own KeyFunc if
// clients rotate addresses within a /64.
func IP(c ClientIP) (KeyFunc, error) {
	at := "httplimit: ClientIP"
	switch {
	case c.Header == "" && (len(c.Proxies) > 0 || c.Hops != 0):
		return nil, fmt.Errorf("%s: Proxies or Hops is set but Header is empty; name the header field your proxies set", at)
	case c.Header != "" && !fieldName.MatchString(c.Header):
		return nil, fmt.Errorf("%s: Header %q is not a header field name", at, c.Header)
	case c.Hops < 0:
		return nil, fmt.Errorf("%s: Hops is %d; it must not be negative", at, c.Hops)
	case c.Header != "" && len(c.Proxies) == 0 && c.Hops == 0:
		return nil, fmt.Errorf("%s: Header %q needs Proxies (your proxies' prefixes) or Hops (how many there are)", at, c.Header)
	}
	s := &clientIP{header: http.CanonicalHeaderKey(c.Header), hops: c.Hops, forwarded: strings.EqualFold(c.Header, "Forwarded")}
	for i, p := range c.Proxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("%s: Proxies[%d] is not a valid prefix", at, i)
		}
		// Addresses are unmapped before they are matched, so a mapped
		// prefix is matched as the IPv4 prefix it stands for.
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		s.proxies = append(s.proxies, p.Masked())
	}
	return s.key, nil
}

// clientIP is a checked ClientIP.
type clientIP struct {
	header    string // canonical
	proxies   []netip.Prefix
	hops      int
	forwarded bool // header is Forwarded: items are elements with a for= parameter
}

func (c *clientIP) key(r *http.Request) (string, error) {
	peer, ok := parseNode(r.RemoteAddr)
	if !ok {
		return "", ErrNoAddress
	}
	if c.header == "" || len(c.proxies) > 0 && !c.proxy(peer) {
		return peer.String(), nil
	}
	// The items of every line of the field, from the right, without
	// splitting them into a slice: the nearest hop is the last.
	values := r.Header[c.header]
	client, count := peer, 0
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for more := true; more; {
			item := v
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				item, v = v[j+1:], v[:j]
			} else {
				more = false
			}
			count++
			a, ok := c.parseItem(item)
			if c.hops > 0 {
				if count < c.hops {
					continue
				}
				if !ok {
					return "", fmt.Errorf("%w: %s's address %d from the right is not an address", ErrNoAddress, c.header, c.hops)
				}
				return a.String(), nil
			}
			if !ok {
				return client.String(), nil // the proxy that wrote it is the last hop known
			}
			client = a
			if !c.proxy(a) {
				return client.String(), nil
			}
		}
	}
	if c.hops > 0 {
		return "", fmt.Errorf("%w: %s holds %d addresses; Hops is %d", ErrNoAddress, c.header, count, c.hops)
	}
	return client.String(), nil // every hop is a proxy: the farthest is the client
}

// proxy reports whether a is one of the proxies.
func (c *clientIP) proxy(a netip.Addr) bool {
	for _, p := range c.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseItem parses one item of the header: an address, with or without a
// port, or for Forwarded an element whose for= parameter is one.
func (c *clientIP) parseItem(item string) (netip.Addr, bool) {
	if !c.forwarded {
		return parseNode(item)
	}
	for item != "" {
		pair, rest, _ := strings.Cut(item, ";")
		item = rest
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
			v = strings.TrimSpace(v)
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return parseNode(v)
		}
	}
	return netip.Addr{}, false
}

// parseNode parses an address as proxies and RemoteAddr write it:
// 192.0.2.7, 192.0.2.7:54321, 2001:db8::1, [2001:db8::1], or
// [2001:db8::1]:443, with or without a zone. It returns the address
// unmapped and without its zone, and false for anything else, including
// the unspecified address (0.0.0.0, ::), which names no client.
func parseNode(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	host := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || len(rest) == 1) {
			return netip.Addr{}, false
		}
	case strings.Count(s, ":") == 1: // IPv4 with a port; IPv6 has at least two colons
		h, port, _ := strings.Cut(s, ":")
		if port == "" {
			return netip.Addr{}, false
		}
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	a = a.WithZone("").Unmap()
	if a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}
