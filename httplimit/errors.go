package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

var (
	// ErrNegativeCost is passed to Config.OnError for a request whose
	// Limit.Cost was negative, as r.ContentLength is (-1) for a request
	// that does not declare its length. Such a request is never admitted:
	// a negative cost would take nothing, or, given back, add tokens.
	ErrNegativeCost = errors.New("httplimit: Limit.Cost returned a negative cost")

	// ErrForeignKey is passed to Config.OnError for a key that, put after
	// its Limit's Prefix, would start another policy's longer Prefix, and
	// so be decided by that policy: a client that sent X-API-Key
	// "ip:203.0.113.7" to a Limit with Prefix "" would spend that
	// address's quota.
	ErrForeignKey = errors.New("httplimit: the key would fall under another policy's Prefix")
)

// limitError is an error one Limit met on a request: its KeyFunc's, its
// Cost's, or the Limiter's for its key.
type limitError struct {
	limit string
	err   error
}

func (e *limitError) Error() string { return fmt.Sprintf("httplimit: limit %q: %v", e.limit, e.err) }
func (e *limitError) Unwrap() error { return e.err }

// WriteError answers a request that could not be keyed or decided, as
// Config.OnError does by default, with an RFC 9457 problem+json body that
// names the limit but shows none of err's text, which may hold what the
// client must not see (another tenant's key, the Limiter's settings):
//
//   - 400 Bad Request for a key the Limiter refuses as too long
//     (hybrid.ErrKeyTooLong), or one that would fall under another
//     policy (ErrForeignKey). The key is the client's to choose, so
//     this is the client's error. 400 and not 431: a key need not come
//     from a header field (ContextValue, your own KeyFunc), and 431
//     tells the client to shrink its header section, which may be tiny.
//   - 411 Length Required for ErrNegativeCost on a request that did not
//     declare its length (r.ContentLength is -1), which a Cost that
//     returns r.ContentLength yields for a chunked upload.
//   - 503 Service Unavailable for hybrid.ErrTooManyKeys: the Limiter
//     tracks as many keys as it may.
//   - 500 Internal Server Error for anything else: ErrNoAddress, a
//     negative cost for another reason, hybrid.ErrNoPolicy, your
//     KeyFunc's errors.
//
// It returns the status it sent.
func WriteError(w http.ResponseWriter, r *http.Request, err error) int {
	key, limit := "the key", "a limit"
	if le := (*limitError)(nil); errors.As(err, &le) {
		key, limit = fmt.Sprintf("the key for the %q limit", le.limit), fmt.Sprintf("the %q limit", le.limit)
	}
	status, detail := http.StatusInternalServerError, ""
	switch {
	case errors.Is(err, hybrid.ErrKeyTooLong):
		status, detail = http.StatusBadRequest, key+" is too long"
	case errors.Is(err, ErrForeignKey):
		status, detail = http.StatusBadRequest, key+" is not accepted"
	case errors.Is(err, ErrNegativeCost) && r.ContentLength < 0:
		status, detail = http.StatusLengthRequired, limit+" counts the request's length; send Content-Length"
	case errors.Is(err, hybrid.ErrTooManyKeys):
		status, detail = http.StatusServiceUnavailable, "the rate limiter tracks as many clients as it can; retry later"
	}
	problem(w, status, problemBody{Type: "about:blank", Title: http.StatusText(status), Detail: detail})
	return status
}

// problemBody is an RFC 9457 problem detail.
type problemBody struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Violated []string `json:"violated-policies,omitempty"`
}

// problem writes p as the response, with status.
func problem(w http.ResponseWriter, status int, p problemBody) {
	writeProblem(w, status, problemJSON(status, p))
}

// problemJSON encodes p with status.
func problemJSON(status int, p problemBody) []byte {
	p.Status = status
	b, _ := json.Marshal(p) // strings and ints only: cannot fail
	return append(b, '\n')
}

// writeProblem writes an encoded problem body as the response.
func writeProblem(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
