// Package httplimit is HTTP middleware around a hybrid.Limiter: it keys
// each request (API key, user, client address, or a function of yours),
// admits it only if every configured limit does, and tells the client
// where it stands with the IETF RateLimit-Policy and RateLimit header
// fields (draft-ietf-httpapi-ratelimit-headers), optionally the legacy
// X-RateLimit-* ones, Retry-After, and an application/problem+json body
// on refusal.
//
// See docs/http.md.
package httplimit

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/partition"
)

// Headers is which rate-limit header fields responses carry.
type Headers int

const (
	// DraftHeaders sends RateLimit-Policy and RateLimit, as the IETF
	// draft defines them. The default.
	DraftHeaders Headers = iota
	// LegacyHeaders sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (epoch seconds), for the most constraining limit.
	LegacyHeaders
	// BothHeaders sends both sets.
	BothHeaders
	// NoHeaders sends neither; refusals still carry Retry-After.
	NoHeaders
)

// A Limit is one limit applied to requests.
type Limit struct {
	// Name names the limit to clients, in the header fields and in a
	// refusal's violated-policies: letters, digits, '-', '_', '.'.
	Name string

	// Key keys the request. Required.
	Key KeyFunc

	// Prefix is put before the key, so that it matches the Limiter's
	// Policy for this limit: "ip:", say, for a Policy with that Prefix.
	// Default: the Prefix of the Limiter's Policy named Name, if any.
	Prefix string

	// Window is shown to clients as the quota's window (w=). Default: the
	// Window of the Limiter's Policy named Name (for a Rate policy, the
	// time to fill its Burst). Required otherwise, unless Config.Headers
	// is NoHeaders.
	Window time.Duration

	// Cost, if set, is what a request costs; default 1.
	Cost func(r *http.Request) int
}

// Config describes the middleware.
type Config struct {
	// Limiter decides. Required.
	Limiter *hybrid.Limiter

	// Limits are checked in order; a request passes only if all admit
	// it, and a refusal by one takes nothing from the others. Put Strict
	// policies last: a Strict decision cannot be taken back.
	Limits []Limit

	// Headers is which header fields to send. Default DraftHeaders.
	Headers Headers

	// UnavailableWhenDegraded answers a refusal with 503 and the draft's
	// temporary-reduced-capacity problem type, instead of 429 and
	// quota-exceeded, while the Limiter is cut off from its fleet
	// (Limiter.Health is not Healthy): the client is refused because the
	// fleet is out of reach, not because it spent its quota.
	UnavailableWhenDegraded bool

	// OnError answers a request that could not be keyed or decided: a
	// KeyFunc failed, or the Limiter refused the key (too long, no
	// policy, too many keys). Default: 500 with a problem+json body.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// New returns the middleware, or an error naming the field of cfg at
// fault.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	switch {
	case cfg.Limiter == nil:
		return nil, fmt.Errorf("httplimit: Config.Limiter is nil")
	case len(cfg.Limits) == 0:
		return nil, fmt.Errorf("httplimit: Config.Limits is empty; give at least one Limit")
	case cfg.Headers < DraftHeaders || cfg.Headers > NoHeaders:
		return nil, fmt.Errorf("httplimit: Config.Headers %d is not a known set", int(cfg.Headers))
	}
	cfg.Limits = append([]Limit(nil), cfg.Limits...)
	policies := map[string]hybrid.Policy{}
	for _, p := range cfg.Limiter.Config().Policies {
		policies[p.Name] = p
	}
	seen := map[string]bool{}
	for i := range cfg.Limits {
		l := &cfg.Limits[i]
		if p, ok := policies[l.Name]; ok {
			if l.Prefix == "" {
				l.Prefix = p.Prefix
			}
			if l.Window == 0 {
				l.Window = p.Window
				if p.Rate > 0 {
					l.Window = time.Duration(float64(p.Burst) / p.Rate * float64(time.Second))
				}
			}
		}
		at := fmt.Sprintf("httplimit: Config.Limits[%d]", i)
		switch {
		case !tokenName.MatchString(l.Name):
			return nil, fmt.Errorf("%s: Name %q must be letters, digits, '-', '_' or '.'", at, l.Name)
		case seen[l.Name]:
			return nil, fmt.Errorf("%s: Name %q is used twice", at, l.Name)
		case l.Key == nil:
			return nil, fmt.Errorf("%s (%q): Key is nil", at, l.Name)
		case l.Window <= 0 && cfg.Headers != NoHeaders:
			return nil, fmt.Errorf("%s (%q): Window is %v; the header fields need the policy's window", at, l.Name, l.Window)
		}
		seen[l.Name] = true
	}
	if cfg.OnError == nil {
		cfg.OnError = func(w http.ResponseWriter, _ *http.Request, err error) {
			problem(w, http.StatusInternalServerError, problemBody{Type: "about:blank", Title: "rate limiting failed", Detail: err.Error()})
		}
	}
	h := handler{cfg: cfg, prep: make([]prepared, len(cfg.Limits))}
	for i, l := range cfg.Limits {
		h.prep[i] = prepared{
			name:   strconv.AppendQuote(nil, l.Name),
			window: strconv.AppendInt([]byte(";w="), int64(math.Ceil(l.Window.Seconds())), 10),
			refusal: problemJSON(http.StatusTooManyRequests, problemBody{
				Type:     "https://iana.org/assignments/http-problem-types#quota-exceeded",
				Title:    "Request cannot be satisfied as assigned quota has been exceeded",
				Detail:   fmt.Sprintf("the %q quota is spent; retry later", l.Name),
				Violated: []string{l.Name},
			}),
		}
	}
	h.unavailable = problemJSON(http.StatusServiceUnavailable, problemBody{
		Type:   "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
		Title:  "Service capacity is temporarily reduced",
		Detail: "the rate limiter cannot reach the rest of its fleet and admits less than usual; retry later",
	})
	return func(next http.Handler) http.Handler {
		hh := h
		hh.next = next
		return &hh
	}, nil
}

type handler struct {
	cfg         Config
	prep        []prepared // per limit, what every response about it repeats
	unavailable []byte     // the 503 body
	next        http.Handler
}

// prepared is what New works out once for a Limit, so that requests do
// not: its quoted name and ";w=" part for the header fields, and its
// refusal's body.
type prepared struct {
	name, window []byte
	refusal      []byte
}

// taken is one limit's part in a request: what it decided.
type taken struct {
	i   int // the limit's index in Config.Limits
	res *hybrid.Reservation
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var buf [4]taken
	took := buf[:0]
	undo := func() {
		for _, t := range took {
			t.res.Cancel()
		}
	}
	for i := range h.cfg.Limits {
		l := &h.cfg.Limits[i]
		key, err := l.Key(r)
		if err != nil {
			undo()
			h.cfg.OnError(w, r, err)
			return
		}
		if key == "" {
			continue
		}
		n := 1
		if l.Cost != nil {
			n = l.Cost(r)
		}
		// Now or not at all: a refused request books no future slot.
		res, err := h.cfg.Limiter.TakeN(l.Prefix+key, n)
		if err != nil {
			undo()
			h.cfg.OnError(w, r, err)
			return
		}
		if !res.OK() {
			undo()
			h.refuse(w, taken{i, res}, took)
			return
		}
		took = append(took, taken{i, res})
	}
	h.headers(w, took, nil)
	h.next.ServeHTTP(w, r)
}

// refuse answers a request that one limit refused, after passed did not.
func (h *handler) refuse(w http.ResponseWriter, refused taken, passed []taken) {
	h.headers(w, passed, &refused)
	if delay := refused.res.Delay(); delay != hybrid.Never && delay > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(delay.Seconds())), 10))
	}
	if h.cfg.UnavailableWhenDegraded && h.cfg.Limiter.Health().Level != partition.Healthy {
		writeProblem(w, http.StatusServiceUnavailable, h.unavailable)
		return
	}
	writeProblem(w, http.StatusTooManyRequests, h.prep[refused.i].refusal)
}

// headers writes the header fields for the limits a request passed, and
// the one that refused it, if any (with nothing remaining). Header names
// are written in Go's canonical form, which Header.Set would otherwise
// rewrite on every request.
func (h *handler) headers(w http.ResponseWriter, passed []taken, refused *taken) {
	all := passed
	if refused != nil {
		all = append(passed[:len(passed):len(passed)], *refused)
	}
	if h.cfg.Headers == NoHeaders || len(all) == 0 {
		return
	}
	draft := h.cfg.Headers == DraftHeaders || h.cfg.Headers == BothHeaders
	var polBuf, curBuf [256]byte
	pol, cur := polBuf[:0], curBuf[:0]
	var tight struct{ quota, left, reset int64 } // the limit with least left, for the legacy fields
	for i, t := range all {
		d, _ := t.res.Decision()
		left, reset := d.Remaining(), int64(math.Ceil(d.ResetAfter().Seconds()))
		if refused != nil && i == len(all)-1 {
			left = 0
		}
		if i == 0 || left < tight.left {
			tight.quota, tight.left, tight.reset = d.Limit(), left, reset
		}
		if !draft {
			continue
		}
		if i > 0 {
			pol, cur = append(pol, ", "...), append(cur, ", "...)
		}
		p := &h.prep[t.i]
		pol = append(strconv.AppendInt(append(append(pol, p.name...), ";q="...), d.Limit(), 10), p.window...)
		cur = strconv.AppendInt(append(strconv.AppendInt(append(append(cur, p.name...), ";r="...), left, 10), ";t="...), reset, 10)
	}
	hd := w.Header()
	if draft {
		hd.Set("Ratelimit-Policy", string(pol))
		hd.Set("Ratelimit", string(cur))
	}
	if h.cfg.Headers == LegacyHeaders || h.cfg.Headers == BothHeaders {
		hd.Set("X-Ratelimit-Limit", strconv.FormatInt(tight.quota, 10))
		hd.Set("X-Ratelimit-Remaining", strconv.FormatInt(tight.left, 10))
		hd.Set("X-Ratelimit-Reset", strconv.FormatInt(time.Now().Unix()+tight.reset, 10))
	}
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
