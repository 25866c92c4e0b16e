package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
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

// base64URL is the alphabet of a hashed key.
const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// hashLen is the length of a hashed key: 16 bytes in unpadded base64url.
const hashLen = 22

// appendHash appends key's SHA-256 digest, cut to 128 bits, to b in
// unpadded base64url.
//
// SHA-256 and not the xxh3 the rest of the module hashes with: the key is
// the client's to choose, and a client that found a key whose hash is
// another's would spend that one's quota. xxh3 promises nothing against
// a chosen input; 128 bits of SHA-256 make such a collision cost about
// 2^64 hashes, and a preimage (an API key read back from Redis) more.
func appendHash(b []byte, key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.AppendEncode(b, sum[:16])
}
