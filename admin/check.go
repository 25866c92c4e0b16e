package admin

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/rules"
)

// CheckRequest is the rate-check endpoint's body: the request's parts
// (rules.Request) and its cost.
type CheckRequest struct {
	Tenant   string `json:"tenant"`
	Tier     string `json:"tier"`
	Endpoint string `json:"endpoint"`
	IP       string `json:"ip"`
	// Hits is the request's cost: 1 if absent; 0 asks how the request
	// stands, taking nothing.
	Hits *int64 `json:"hits"`
}

// CheckResponse is the rate-check endpoint's answer, with status 200
// whether the request is allowed or not.
type CheckResponse struct {
	Allowed bool `json:"allowed"`
	// Limit and Remaining are the deciding rule's (rules.Verdict): its
	// capacity, and what is left of it.
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	// Reset is how long, in seconds, until the rule's bucket is full
	// again; RetryAfter, for a refusal, how long until the request could
	// be allowed (-1: never, it costs more than the limit holds).
	Reset      float64 `json:"reset"`
	RetryAfter float64 `json:"retry_after,omitempty"`
	// Policy is the deciding rule ("rule" or "rule/tier"), empty if no
	// rule applied.
	Policy string `json:"policy,omitempty"`
	// Degraded says the fleet could not be reached and the rule's fail
	// mode decided.
	Degraded bool `json:"degraded,omitempty"`
}

// Check returns the rate-check endpoint: POST a CheckRequest as JSON,
// get a CheckResponse with status 200 whether it is allowed or not, as
// gateways expect. The request is checked against every rule that
// applies, all or nothing (rules.Limiter.AllowN). A body that is not a
// CheckRequest, or a key the limiter refuses to track (too long), is a
// 400; a limiter holding all the keys it may (hybrid.ErrTooManyKeys) a
// 503. It takes no authorization: mount it where only your gateways
// reach it, or wrap it.
func Check(rl *rules.Limiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			problem(w, http.StatusMethodNotAllowed, "POST a JSON check request")
			return
		}
		var req CheckRequest
		if !decode(w, r, &req) {
			return
		}
		hits := int64(1)
		if req.Hits != nil {
			hits = *req.Hits
		}
		if hits < 0 || hits > math.MaxInt32 {
			problem(w, http.StatusBadRequest, "hits must be from 0 to 2147483647")
			return
		}
		v, err := rl.AllowN(rules.Request{Tenant: req.Tenant, Tier: req.Tier, Endpoint: req.Endpoint, IP: req.IP}, int(hits))
		switch {
		case errors.Is(err, hybrid.ErrTooManyKeys):
			problem(w, http.StatusServiceUnavailable, err.Error())
			return
		case err != nil:
			problem(w, http.StatusBadRequest, err.Error())
			return
		}
		out := CheckResponse{Allowed: v.Allowed(), Limit: v.Limit(), Remaining: v.Remaining(),
			Reset: v.ResetAfter().Seconds(), Policy: v.Policy, Degraded: v.Degraded()}
		if !v.Allowed() {
			out.RetryAfter = v.RetryAfter().Seconds()
			if v.RetryAfter() == local.Never {
				out.RetryAfter = -1
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
