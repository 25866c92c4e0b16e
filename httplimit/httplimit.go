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
	"cmp"
	"errors"
	"fmt"
	"log"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
	"github.com/hybridlimit/hybridlimit/internal/enumtext"
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

// String returns the set's name: "draft", "legacy", "both" or "none".
func (h Headers) String() string {
	switch h {
	case DraftHeaders:
		return "draft"
	case LegacyHeaders:
		return "legacy"
	case BothHeaders:
		return "both"
	case NoHeaders:
		return "none"
	}
	return fmt.Sprintf("Headers(%d)", int(h))
}

var headersNames = []enumtext.Name[Headers]{
	{Text: "draft", Value: DraftHeaders}, {Text: "legacy", Value: LegacyHeaders},
	{Text: "both", Value: BothHeaders}, {Text: "none", Value: NoHeaders},
}

// MarshalText returns the set's name, for config files; a value that is
// not a Headers is an error.
func (h Headers) MarshalText() ([]byte, error) {
	return enumtext.Marshal("httplimit: Headers", h.String(), h >= DraftHeaders && h <= NoHeaders)
}

// UnmarshalText sets h from its name: "draft", "legacy", "both" or
// "none", in any case.
func (h *Headers) UnmarshalText(text []byte) error {
	v, err := enumtext.Parse("httplimit: Headers", text, headersNames)
	if err == nil {
		*h = v
	}
	return err
}

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
	// New refuses a Prefix no policy matches, and one that another Limit
	// uses: the two would spend each other's quotas.
	Prefix string

	// Window is shown to clients as the quota's window (w=). Default: the
	// Window of the Limiter's Policy that Prefix matches (for a Rate
	// policy, the time to fill its Burst). Required otherwise, unless
	// Config.Headers is NoHeaders.
	Window time.Duration

	// Cost, if set, is what a request costs; default 1. A cost of 0
	// takes nothing. A negative cost, such as r.ContentLength for a
	// request that does not declare its length, is never admitted: the
	// request goes to Config.OnError with ErrNegativeCost, which the
	// default answers with 411 Length Required when r.ContentLength is
	// -1. A cost above what the policy can ever hold is answered with 413
	// Content Too Large, which retrying cannot change.
	Cost func(r *http.Request) int

	// HashKeys, if set, hands the Limiter a SHA-256 digest of the key (22
	// characters after Prefix) in place of the key: a key of any length
	// fits the Limiter's MaxKeyLen, and keys a client sends (API keys,
	// tokens) are not kept as written in memory, in Redis or in
	// Limiter.HotKeys. Without it, a key longer than MaxKeyLen less
	// Prefix is refused, with 400 by default.
	HashKeys bool
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
	// KeyFunc failed, a Cost was negative, or the Limiter refused the key
	// (too long, too many keys). err names the limit and wraps the
	// cause. Default: WriteError, which answers the client's errors with
	// a 4xx, and logs to ErrorLog what it answers with a 5xx.
	OnError func(w http.ResponseWriter, r *http.Request, err error)

	// ErrorLog logs the errors the default OnError answers with a 5xx.
	// Default: the log package's standard logger.
	ErrorLog *log.Logger
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// New returns the middleware, or an error naming the field of cfg at
// fault, which wraps ErrInvalidConfig.
func New(cfg Config) (func(http.Handler) http.Handler, error) {
	h, err := newMiddleware(cfg)
	if err != nil {
		return nil, cfgerr.Wrap(ErrInvalidConfig, err)
	}
	return h, nil
}

// ErrInvalidConfig is wrapped by every error New returns.
var ErrInvalidConfig = errors.New("httplimit: invalid Config")

func newMiddleware(cfg Config) (func(http.Handler) http.Handler, error) {
	switch {
	case cfg.Limiter == nil:
		return nil, fmt.Errorf("httplimit: Config.Limiter is nil")
	case len(cfg.Limits) == 0:
		return nil, fmt.Errorf("httplimit: Config.Limits is empty; give at least one Limit")
	case cfg.Headers < DraftHeaders || cfg.Headers > NoHeaders:
		return nil, fmt.Errorf("httplimit: Config.Headers %d is not a known set", int(cfg.Headers))
	}
	lc := cfg.Limiter.Config()
	h := handler{cfg: cfg, limits: make([]limit, len(cfg.Limits))}
	names, prefixes := map[string]bool{}, map[string]int{}
	for i, l := range cfg.Limits {
		at := fmt.Sprintf("httplimit: Config.Limits[%d]", i)
		switch {
		case !tokenName.MatchString(l.Name):
			return nil, fmt.Errorf("%s: Name %q must be letters, digits, '-', '_' or '.'", at, l.Name)
		case names[l.Name]:
			return nil, fmt.Errorf("%s: Name %q is used twice", at, l.Name)
		case l.Key == nil:
			return nil, fmt.Errorf("%s (%q): Key is nil", at, l.Name)
		}
		names[l.Name] = true
		at += fmt.Sprintf(" (%q)", l.Name)
		if l.Prefix == "" {
			if p, ok := named(lc.Policies, l.Name); ok {
				l.Prefix = p.Prefix
			}
		}
		if j, ok := prefixes[l.Prefix]; ok {
			return nil, fmt.Errorf("%s: Prefix %q is also Limits[%d]'s; the two limits would spend each other's quotas", at, l.Prefix, j)
		}
		prefixes[l.Prefix] = i
		pol, ok := resolve(lc.Policies, l.Prefix)
		if !ok && lc.Resolve == nil {
			return nil, fmt.Errorf("%s: no policy of the Limiter matches Prefix %q, so every request would fail; add a hybrid.Policy with that Prefix, or name the Limit after one: %w", at, l.Prefix, hybrid.ErrNoPolicy)
		}
		if !ok {
			// Config.Resolve picks policies by key, which cannot be
			// probed here; the named policy is the best guess.
			pol, ok = named(lc.Policies, l.Name)
		}
		if l.Window == 0 && ok {
			l.Window = pol.Window
			if pol.Rate > 0 {
				l.Window = time.Duration(float64(pol.Burst) / pol.Rate * float64(time.Second))
			}
		}
		switch {
		case l.Window <= 0 && cfg.Headers != NoHeaders:
			return nil, fmt.Errorf("%s: Window is %v; the header fields need the policy's window", at, l.Window)
		case l.HashKeys && len(l.Prefix)+hashLen > lc.MaxKeyLen:
			return nil, fmt.Errorf("%s: Prefix %q and a hashed key (%d bytes) exceed the Limiter's MaxKeyLen %d", at, l.Prefix, hashLen, lc.MaxKeyLen)
		}
		h.limits[i] = limit{
			Limit:  l,
			prefix: []byte(l.Prefix),
			// A Strict decision is not given back, and the Limiter
			// cannot be asked what a Strict key has left without
			// spending: keep what it said.
			reread: ok && pol.Mode != hybrid.Strict,
			name:   strconv.AppendQuote(nil, l.Name),
			window: strconv.AppendInt([]byte(";w="), int64(math.Ceil(l.Window.Seconds())), 10),
			refusal: problemJSON(http.StatusTooManyRequests, problemBody{
				Type:     "https://iana.org/assignments/http-problem-types#quota-exceeded",
				Title:    "Request cannot be satisfied as assigned quota has been exceeded",
				Detail:   fmt.Sprintf("the %q quota is spent; retry later", l.Name),
				Violated: []string{l.Name},
			}),
		}
		var prefixes []string // what could take a key of this Limit elsewhere
		if lc.Resolve == nil {
			for _, p := range lc.Policies {
				prefixes = append(prefixes, p.Prefix)
			}
		}
		for _, other := range cfg.Limits {
			prefixes = append(prefixes, other.Prefix)
		}
		h.limits[i].foreign = foreign(prefixes, l.Prefix)
		if l.HashKeys {
			// A client cannot choose a digest, but one in 64 would
			// start with a one-letter Prefix by chance and be decided
			// elsewhere: refuse such a Prefix here, not the client.
			for _, f := range h.limits[i].foreign {
				if strings.Trim(f, base64URL) == "" {
					return nil, fmt.Errorf("httplimit: Config.Limits[%d] (%q): HashKeys is set, and a hashed key may start with %q, which another policy or Limit takes: give the Limit a Prefix that ends in a character outside base64url, such as ':'", i, l.Name, l.Prefix+f)
				}
			}
		}
	}
	if h.cfg.OnError == nil {
		logger := cmp.Or(cfg.ErrorLog, log.Default())
		h.cfg.OnError = func(w http.ResponseWriter, r *http.Request, err error) {
			if WriteError(w, r, err) >= 500 {
				logger.Print(err)
			}
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

// named returns the policy called name.
func named(policies []hybrid.Policy, name string) (hybrid.Policy, bool) {
	for _, p := range policies {
		if p.Name == name {
			return p, true
		}
	}
	return hybrid.Policy{}, false
}

// resolve returns the policy the Limiter gives a key that is prefix and
// nothing more, by hybrid's rule: the longest Prefix the key starts with,
// the first listed among equals. It is what decides every key of a Limit
// with that Prefix, except those foreign returns.
func resolve(policies []hybrid.Policy, prefix string) (hybrid.Policy, bool) {
	best, ok := hybrid.Policy{}, false
	for _, p := range policies {
		if strings.HasPrefix(prefix, p.Prefix) && (!ok || len(p.Prefix) > len(best.Prefix)) {
			best, ok = p, true
		}
	}
	return best, ok
}

// foreign returns, for a Limit with prefix, the starts of a key that
// would take it to another policy, or name another Limit's key (one
// client could then spend another's quota): the rest of each longer
// Prefix, of a policy or of a Limit, that begins with prefix.
func foreign(prefixes []string, prefix string) []string {
	var out []string
	for _, p := range prefixes {
		if len(p) > len(prefix) && strings.HasPrefix(p, prefix) && !slices.Contains(out, p[len(prefix):]) {
			out = append(out, p[len(prefix):])
		}
	}
	return out
}
