package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// rls is the Envoy rate limit service (envoy.service.ratelimit.v3) over
// a hybrid.Limiter and an envoyproxy/ratelimit configuration.
type rls struct {
	rlspb.UnimplementedRateLimitServiceServer
	l    *hybrid.Limiter
	conf *envoyConfig
	// headers names the limit, remaining and reset headers to add, as
	// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED adds them;
	// nil for none.
	headers *[3]string
	// peek: ask each limit what it has left before taking from any. With
	// no fleet the policies are Local, whose takes a concurrent take of
	// the same key keeps from being given back: a request over one
	// descriptor's limit could still spend the others'.
	peek bool
	// fleet: the policies are Hybrid, which take limits per call (a
	// descriptor's limit override); Local ones do not.
	fleet bool
}

// Bounds on a request, so that one cannot take the server's memory.
const (
	maxDescriptors = 64
	maxEntries     = 32
)

// applied is a descriptor's limit and its key.
type applied struct {
	lim       *limit
	key       string
	override  bool  // the request's limit override: the key's limit is the call's
	perWindow int64 // an override's rate, a window of its template policy (overrideLimit)
}

// overrideLimit is how a limit override of rpu a period of mult units u
// (mult 0 is 1) is decided: under the template policy of unit tmpl, at
// perWindow requests a tmpl (a token bucket holding rpu). The template is
// the first whose window is a whole number of periods, so that it
// depends on the period alone and a changed rpu keeps the key and what it
// spent: 10 per 30 seconds is 20 a minute. For a period no window is a
// multiple of (7 seconds), the first window the rate fills with a whole
// number of requests, which a changed rpu may change. ok is false if
// none does (an odd number every two years).
func overrideLimit(rpu uint32, u typepb.RateLimitUnit, mult uint32) (tmpl typepb.RateLimitUnit, perWindow int64, ok bool) {
	secs := func(u typepb.RateLimitUnit) int64 {
		return int64(units[rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[u.String()])] / time.Second)
	}
	period := secs(u) * int64(max(mult, 1)) // at most 2^32 years in seconds: under 2^57
	for t := typepb.RateLimitUnit_SECOND; t <= typepb.RateLimitUnit_YEAR; t++ {
		if secs(t)%period == 0 && rpu > 0 {
			return t, int64(rpu) * (secs(t) / period), true // rpu < 2^31, a year < 2^25 s
		}
	}
	for t := typepb.RateLimitUnit_SECOND; t <= typepb.RateLimitUnit_YEAR; t++ {
		if n := int64(rpu) * secs(t); n%period == 0 && n/period >= 1 {
			return t, n / period, true
		}
	}
	return 0, 0, false
}

// ShouldRateLimit decides a request's descriptors, all or nothing: a
// descriptor over its limit gives back what the others took. A
// descriptor's limit override is its limit, whatever the configuration
// says of it. A request that cannot be decided (no domain, no
// descriptors, an unknown domain, an empty entry, a limit override
// hybridlimitd cannot take, a cost beyond 2^31-1) is an InvalidArgument,
// never an OK.
func (s *rls) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	root, hits, err := s.check(req)
	if err != nil {
		return nil, err
	}
	limits := make([]*applied, len(req.GetDescriptors()))
	named := map[string]bool{}
	for i, d := range req.GetDescriptors() {
		entries := make([]entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = entry{e.GetKey(), e.GetValue()}
		}
		if o := d.GetLimit(); o != nil {
			// As envoyproxy/ratelimit: an override applies whatever the
			// configuration says of the descriptor, keyed by it and its
			// domain (an entry with an empty key, which no request has).
			u := o.GetUnit()
			tmpl, per, _ := overrideLimit(o.GetRequestsPerUnit(), u, o.GetUnitMultiplier().GetValue()) // check made sure it fits
			entries = append([]entry{{"", req.GetDomain()}}, entries...)
			limits[i] = &applied{key: overridePrefix(tmpl) + keyOf(entries), override: true, perWindow: per, lim: &limit{
				rpu: o.GetRequestsPerUnit(), shadow: s.conf.shadow, unit: rlspb.RateLimitResponse_RateLimit_Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[u.String()])}}
			continue
		}
		if l := root.find(entries); l != nil {
			limits[i] = &applied{lim: l, key: l.prefix + keyOf(entries)}
			if l.name != "" {
				named[l.name] = true
			}
		}
	}
	// A limit another applying limit replaces does not apply.
	for _, a := range limits {
		if a == nil {
			continue
		}
		for _, r := range a.lim.replaces {
			for i, b := range limits {
				if b != nil && b.lim.name == r && named[r] {
					limits[i] = nil
				}
			}
		}
	}
	short := s.peek && s.short(limits, hits)
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(limits))}
	var took []*hybrid.Reservation
	var tightest *rlspb.RateLimitResponse_DescriptorStatus
	for i, a := range limits {
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case a == nil:
			continue
		case a.lim.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		}
		st.CurrentLimit = &rlspb.RateLimitResponse_RateLimit{Name: a.lim.name, RequestsPerUnit: a.lim.rpu, Unit: a.lim.unit}
		if a.lim.rpu == 0 {
			if !a.lim.shadow { // 0 a unit: every request is over, but in shadow mode
				st.Code = rlspb.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
			}
			continue
		}
		n := hits[i]
		if short {
			n = 0 // over some limit: take from none, and tell each where it stands
		}
		if a.override {
			// The key's limit is the override's: a new key starts under
			// it, a key under another moves to it within an interval.
			if _, err := s.l.AllowNLimit(a.key, 0, a.perWindow, int64(a.lim.rpu)); errors.Is(err, hybrid.ErrTooManyKeys) {
				st.Code, resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT // as TakeN's, below
				continue
			} else if err != nil {
				cancelAll(took)
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its limit override: %v", i, err)
			}
		}
		res, err := s.l.TakeN(a.key, n)
		if errors.Is(err, hybrid.ErrTooManyKeys) {
			// A flood of distinct values fills the table: over the limit,
			// not an error, which Envoy would let through (its
			// failure_mode_deny is false by default).
			st.Code, resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT, rlspb.RateLimitResponse_OVER_LIMIT
			continue
		}
		if err != nil {
			cancelAll(took)
			return nil, status.Errorf(codes.Internal, "descriptor %d: %v", i, err)
		}
		d := res.Decision()
		st.LimitRemaining = uint32(min(max(d.Remaining(), 0), math.MaxUint32))
		st.DurationUntilReset = durationpb.New(d.ResetAfter())
		if !d.Allowed() || short && !a.lim.shadow && d.Remaining() < int64(hits[i]) {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		} else {
			took = append(took, res)
		}
		if tightest == nil || st.LimitRemaining < tightest.LimitRemaining {
			tightest = st
		}
	}
	switch {
	case resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT:
	case s.conf.shadow:
		// Every limit in shadow mode (--shadow): decided and counted,
		// answered OK whatever refused, and what was taken stays taken,
		// as the request goes on.
		resp.OverallCode = rlspb.RateLimitResponse_OK
		for _, st := range resp.Statuses {
			st.Code = rlspb.RateLimitResponse_OK
		}
	default:
		cancelAll(took) // all or nothing
	}
	if h := s.headers; h != nil && tightest != nil {
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: h[0], Value: strconv.FormatUint(uint64(tightest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: h[1], Value: strconv.FormatUint(uint64(tightest.LimitRemaining), 10)},
			{Key: h[2], Value: strconv.FormatInt(int64(tightest.DurationUntilReset.AsDuration().Seconds()+0.999), 10)},
		}
	}
	return resp, nil
}

// short reports whether some limit has less left than its descriptor
// costs (see rls.peek).
func (s *rls) short(limits []*applied, hits []int) bool {
	for i, a := range limits {
		if a == nil || a.lim.unlimited || a.lim.shadow || a.lim.rpu == 0 {
			continue
		}
		if d, err := s.l.AllowN(a.key, 0); err == nil && d.Remaining() < int64(hits[i]) {
			return true
		}
	}
	return false
}

// check refuses what cannot be decided, and returns the domain's tree
// and each descriptor's cost.
func (s *rls) check(req *rlspb.RateLimitRequest) (*node, []int, error) {
	switch {
	case req.GetDomain() == "":
		return nil, nil, status.Error(codes.InvalidArgument, "the domain is empty")
	case len(req.GetDescriptors()) == 0:
		return nil, nil, status.Error(codes.InvalidArgument, "the descriptor list is empty")
	case len(req.GetDescriptors()) > maxDescriptors:
		return nil, nil, status.Errorf(codes.InvalidArgument, "%d descriptors; at most %d", len(req.GetDescriptors()), maxDescriptors)
	}
	root := s.conf.domains[req.GetDomain()]
	if root == nil {
		return nil, nil, status.Errorf(codes.InvalidArgument, "unknown domain %q", req.GetDomain())
	}
	hits := make([]int, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if n := len(d.GetEntries()); n == 0 || n > maxEntries {
			return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries; it needs 1 to %d", i, n, maxEntries)
		}
		for _, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d has an entry with an empty key", i)
			}
		}
		if o := d.GetLimit(); o != nil {
			switch u := o.GetUnit(); {
			case u < typepb.RateLimitUnit_SECOND || u > typepb.RateLimitUnit_YEAR:
				return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its limit override's unit %v is not SECOND to YEAR", i, u)
			case o.GetRequestsPerUnit() > math.MaxInt32:
				return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its limit override of %d a unit is more than 2147483647", i, o.GetRequestsPerUnit())
			case o.GetRequestsPerUnit() > 0:
				if _, _, ok := overrideLimit(o.GetRequestsPerUnit(), u, o.GetUnitMultiplier().GetValue()); !ok {
					return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d: its limit override of %d per %d %v is no whole number of requests a second, minute, hour, day, month or year", i, o.GetRequestsPerUnit(), o.GetUnitMultiplier().GetValue(), u)
				}
			}
			if !s.fleet {
				return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d overrides its limit: limit overrides need a fleet (--redis or --gossip-bind)", i)
			}
		}
		h := uint64(req.GetHitsAddend())
		if d.GetHitsAddend() != nil {
			h = d.GetHitsAddend().GetValue()
		} else if h == 0 {
			h = 1 // as envoyproxy/ratelimit: an unset hits_addend is 1
		}
		if h > math.MaxInt32 {
			return nil, nil, status.Errorf(codes.InvalidArgument, "descriptor %d: hits_addend %d is more than 2147483647", i, h)
		}
		hits[i] = int(h)
	}
	return root, hits, nil
}

// keyOf is the key of entries under a limit: each entry's key and value,
// '.', '=' and '\' escaped in either, so that no two descriptors share
// one; a key longer than maxKey is its SHA-256, so that a client padding
// a header's value is limited like any other, never refused as an error
// (which Envoy lets through).
func keyOf(entries []entry) string {
	k := joinEntries(entries)
	if len(k) <= maxKey {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "#" + hex.EncodeToString(sum[:]) // '#' starts no escaped entry: keys start with a key's first byte, and empty keys are refused
}

// maxKey is the longest descriptor key kept as it is; with its prefix it
// stays under hybrid's default MaxKeyLen (256).
const maxKey = 200

func joinEntries(entries []entry) string {
	var b strings.Builder
	esc := func(s string) {
		for i := 0; i < len(s); i++ {
			if s[i] == '.' || s[i] == '\\' || s[i] == '=' || s[i] == '#' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
	}
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		esc(e.key)
		b.WriteByte('=')
		esc(e.value)
	}
	return b.String()
}

func cancelAll(rs []*hybrid.Reservation) {
	for _, r := range rs {
		r.Cancel()
	}
}

var _ rlspb.RateLimitServiceServer = (*rls)(nil)
