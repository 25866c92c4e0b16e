package httplimit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/partition"
)

type handler struct {
	cfg         Config
	limits      []limit // Config.Limits, defaults filled in, with what New worked out
	unavailable []byte  // the 503 body
	next        http.Handler
}

// limit is a Limit and what New works out once for it, so that requests
// do not.
type limit struct {
	Limit
	prefix  []byte
	foreign []string // starts of a key that would reach another policy
	reread  bool     // after a refusal by a later limit, ask what is left
	// For the header fields and the refusal: the quoted name, the ";w="
	// part, and the 429 body.
	name, window []byte
	refusal      []byte
}

// taken is one limit's part in a request: what it decided.
type taken struct {
	i   int    // the limit's index
	key string // as the Limiter saw it
	n   int    // the cost
	res *hybrid.Reservation
	d   hybrid.Decision
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var buf [4]taken
	took := buf[:0]
	undo := func() {
		for _, t := range took {
			t.res.Cancel()
		}
	}
	fail := func(l *limit, err error) {
		undo()
		h.cfg.OnError(w, r, &limitError{limit: l.Name, err: err})
	}
	for i := range h.limits {
		l := &h.limits[i]
		key, err := l.Key(r)
		if err != nil {
			fail(l, err)
			return
		}
		if key == "" {
			continue
		}
		n := 1
		if l.Cost != nil {
			// Checked here, not left to the Limiter: a negative cost
			// takes nothing, and given back by a later limit's refusal
			// would add tokens.
			if n = l.Cost(r); n < 0 {
				fail(l, fmt.Errorf("%w (%d)", ErrNegativeCost, n))
				return
			}
		}
		if key, err = l.key(key); err != nil {
			fail(l, err)
			return
		}
		// Now or not at all: a refused request books no future slot.
		res, err := h.cfg.Limiter.TakeN(key, n)
		if err != nil {
			fail(l, err)
			return
		}
		d := res.Decision()
		t := taken{i: i, key: key, n: n, res: res, d: d}
		if !d.Allowed() {
			undo()
			h.refuse(w, t, took)
			return
		}
		took = append(took, t)
	}
	h.headers(w, took, nil)
	h.next.ServeHTTP(w, r)
}

// key is the key the Limiter decides for a request that l keys k.
func (l *limit) key(k string) (string, error) {
	if l.HashKeys {
		var buf [64]byte
		// New refused a Prefix a digest could reach: no foreign check.
		return string(appendHash(append(buf[:0], l.prefix...), k)), nil
	}
	if err := l.checkForeign(k); err != nil {
		return "", err
	}
	if len(l.prefix) == 0 {
		return k, nil
	}
	return l.Prefix + k, nil
}

func (l *limit) checkForeign(k string) error {
	for _, f := range l.foreign {
		if strings.HasPrefix(k, f) {
			return ErrForeignKey
		}
	}
	return nil
}

// refuse answers a request that one limit refused, after passed did not;
// their tokens have been given back where they could be.
func (h *handler) refuse(w http.ResponseWriter, refused taken, passed []taken) {
	for j := range passed {
		// What they show now includes what was given back.
		if t := &passed[j]; h.limits[t.i].reread {
			if d, err := h.cfg.Limiter.AllowN(t.key, 0); err == nil {
				t.d = d
			}
		}
	}
	h.headers(w, passed, &refused)
	l := &h.limits[refused.i]
	delay := refused.d.RetryAfter()
	if delay == local.Never {
		// The cost is above what the policy can ever hold: no wait makes
		// it pass, so no Retry-After, and not a 429, which says to wait.
		problem(w, http.StatusRequestEntityTooLarge, problemBody{
			Type:     "about:blank",
			Title:    http.StatusText(http.StatusRequestEntityTooLarge),
			Detail:   fmt.Sprintf("the request costs %d, more than the %q quota can ever hold (%d); it will never be admitted", refused.n, l.Name, refused.d.Limit()),
			Violated: []string{l.Name},
		})
		return
	}
	if delay > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(delay.Seconds())), 10))
	}
	if h.cfg.UnavailableWhenDegraded && h.cfg.Limiter.Health().Level != partition.Healthy {
		writeProblem(w, http.StatusServiceUnavailable, h.unavailable)
		return
	}
	writeProblem(w, http.StatusTooManyRequests, l.refusal)
}

// headers writes the header fields for the limits a request passed, and
// the one that refused it, if any. Header names are written in Go's
// canonical form, which Header.Set would otherwise rewrite on every
// request.
//
// A limit whose Decision does not know what is left gets no RateLimit
// item, only its RateLimit-Policy one: a Hybrid key before its first
// grant reports its starter credit and no reset (r=0;t=0 on a new key's
// first request), which would tell a client to back off from a quota it
// has not touched. Such a Decision has less than the limit left yet
// nothing to wait for; no other does.
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
	var tight struct { // the limit with least left, for the legacy fields
		quota, left, reset int64
		known              bool
	}
	for i, t := range all {
		d := t.d
		left, reset := d.Remaining(), d.ResetAfter()
		known := reset > 0 || left >= d.Limit()
		if refused != nil && i == len(all)-1 {
			known = true
			if delay := t.d.RetryAfter(); delay != local.Never {
				left, reset = 0, max(reset, delay) // full again no sooner than one more is admitted
			}
		}
		secs := int64(math.Ceil(reset.Seconds()))
		if i == 0 || known && (!tight.known || left < tight.left) {
			tight.quota, tight.left, tight.reset, tight.known = d.Limit(), left, secs, known
		}
		if !draft {
			continue
		}
		p := &h.limits[t.i]
		if i > 0 {
			pol = append(pol, ", "...)
		}
		pol = append(strconv.AppendInt(append(append(pol, p.name...), ";q="...), d.Limit(), 10), p.window...)
		if !known {
			continue
		}
		if len(cur) > 0 {
			cur = append(cur, ", "...)
		}
		cur = strconv.AppendInt(append(strconv.AppendInt(append(append(cur, p.name...), ";r="...), left, 10), ";t="...), secs, 10)
	}
	hd := w.Header()
	if draft {
		hd.Set("Ratelimit-Policy", string(pol))
		if len(cur) > 0 {
			hd.Set("Ratelimit", string(cur))
		}
	}
	if h.cfg.Headers == LegacyHeaders || h.cfg.Headers == BothHeaders {
		hd.Set("X-Ratelimit-Limit", strconv.FormatInt(tight.quota, 10))
		if tight.known {
			hd.Set("X-Ratelimit-Remaining", strconv.FormatInt(tight.left, 10))
			hd.Set("X-Ratelimit-Reset", strconv.FormatInt(time.Now().Unix()+tight.reset, 10))
		}
	}
}
