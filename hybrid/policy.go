package hybrid

import (
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
	"github.com/hybridlimit/hybridlimit/internal/enumtext"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
)

// Mode is where a policy's decisions are made.
type Mode int

const (
	// Hybrid decides from a local lease on this node's share of the
	// fleet's quota and reconciles with the fleet every sync interval. It
	// is the default: nanoseconds per decision, a bounded number of fleet
	// operations per interval whatever the traffic.
	Hybrid Mode = iota
	// Local limits this node alone; the fleet is never consulted. A
	// Local policy's keys are held by a local.Limiter of its own, with
	// its MaxKeys rule (see Config.MaxKeys).
	Local
	// Strict decides every request in the fleet's store (Redis): exact
	// across the fleet, one round trip per decision.
	Strict
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Hybrid:
		return "hybrid"
	case Local:
		return "local"
	case Strict:
		return "strict"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

var modeNames = []enumtext.Name[Mode]{{Text: "hybrid", Value: Hybrid}, {Text: "local", Value: Local}, {Text: "strict", Value: Strict}}

// MarshalText returns the mode's name, for config files; a value that is
// not a Mode is an error.
func (m Mode) MarshalText() ([]byte, error) {
	return enumtext.Marshal("hybrid: Mode", m.String(), m >= Hybrid && m <= Strict)
}

// UnmarshalText sets m from its name: "hybrid", "local" or "strict", in
// any case.
func (m *Mode) UnmarshalText(text []byte) error {
	v, err := enumtext.Parse("hybrid: Mode", text, modeNames)
	if err == nil {
		*m = v
	}
	return err
}

// FailMode is what a policy does when the fleet cannot be reached and what
// was leased from it is spent.
type FailMode int

const (
	// FailStatic keeps limiting locally, to this node's last known share
	// of the quota. It is the default.
	FailStatic FailMode = iota
	// FailOpen admits every request until the fleet is back.
	FailOpen
	// FailClosed refuses every request until the fleet is back.
	FailClosed
)

// String returns the fail mode's name.
func (f FailMode) String() string {
	switch f {
	case FailStatic:
		return "failstatic"
	case FailOpen:
		return "failopen"
	case FailClosed:
		return "failclosed"
	}
	return fmt.Sprintf("FailMode(%d)", int(f))
}

var failModeNames = []enumtext.Name[FailMode]{
	{Text: "failstatic", Value: FailStatic}, {Text: "static", Value: FailStatic},
	{Text: "failopen", Value: FailOpen}, {Text: "open", Value: FailOpen},
	{Text: "failclosed", Value: FailClosed}, {Text: "closed", Value: FailClosed},
}

// MarshalText returns the fail mode's name, for config files; a value
// that is not a FailMode is an error.
func (f FailMode) MarshalText() ([]byte, error) {
	return enumtext.Marshal("hybrid: FailMode", f.String(), f >= FailStatic && f <= FailClosed)
}

// UnmarshalText sets f from its name: "failstatic", "failopen" or
// "failclosed" (or "static", "open", "closed"), in any case, with or
// without '_' or '-'.
func (f *FailMode) UnmarshalText(text []byte) error {
	v, err := enumtext.Parse("hybrid: FailMode", text, failModeNames)
	if err == nil {
		*f = v
	}
	return err
}

// Policy is one fleet-wide limit and the keys it applies to.
//
// The limit is Limit requests per Window for the whole fleet, or, for a
// token bucket, Rate tokens per second with Burst capacity, in the manner
// of golang.org/x/time/rate.
type Policy struct {
	// Name identifies the policy in errors and to Config.Resolve.
	// Required, unique.
	Name string

	// Prefix selects the keys the policy applies to: a key takes the
	// policy with the longest Prefix it starts with. The empty Prefix
	// matches every key, which makes a default policy.
	Prefix string

	// Mode is where decisions are made. Default Hybrid.
	Mode Mode

	// Algorithm is the limit's algorithm. Default TokenBucket. Hybrid and
	// Strict policies take TokenBucket or SlidingWindow; FixedWindow and
	// SlidingLog are for Local policies only.
	Algorithm local.Algorithm

	// Limit is how many requests the fleet may make per Window, per key.
	// A Hybrid or Strict policy's capacity (Burst, or Limit for a window
	// algorithm) is at most 2^31-1 (2,147,483,647): the largest cost it
	// admits, and every such cost is counted exactly.
	Limit int64

	// Window is the period of Limit. Hybrid and Strict policies need at
	// least a millisecond.
	Window time.Duration

	// Rate, for TokenBucket, is an alternative to Limit and Window: tokens
	// per second. Burst is then required.
	Rate float64

	// Burst is TokenBucket's capacity: how many requests a full bucket
	// admits at once across the fleet. Default Limit.
	Burst int64

	// OnUnreachable is what Hybrid and Strict decisions do when the fleet
	// cannot be reached and this node's lease is spent. Default
	// FailStatic: limit locally to this node's last known share, scaled
	// by Config.Ladder. See docs/partitions.md.
	OnUnreachable FailMode

	// Shadow decides, counts and reports as if the limit were enforced,
	// and admits every request anyway: a request the policy would refuse
	// is admitted, spends nothing, and counts in PolicyStats.Shadowed
	// (hybridlimit_requests_total{outcome="shadow"}) instead of Refused.
	// It is for rolling out a new limit: watch what it would refuse,
	// then turn Shadow off.
	Shadow bool
}

// Validate reports the first field of p that is out of range, as New and
// SetPolicies would; what it cannot tell alone is whether a Limiter's
// Syncer serves p's Mode (Hybrid and Strict need one, Strict one that
// decides single requests). The error wraps ErrInvalidConfig.
func (p Policy) Validate() error {
	if _, err := checkFields("hybrid: Policy", &p); err != nil {
		return cfgerr.Wrap(ErrInvalidConfig, err)
	}
	return nil
}

// checkPolicy validates p, the policy at ("hybrid: Config.Policies[i]"),
// naming the field at fault, and returns its fleet-wide limit.
func checkPolicy(at string, p *Policy, syncer fleet.Syncer) (fleet.Limit, error) {
	lim, err := checkFields(at, p)
	if err != nil || p.Mode == Local {
		return lim, err
	}
	if p.Name != "" {
		at += fmt.Sprintf(" (%q)", p.Name)
	}
	if syncer == nil {
		return fleet.Limit{}, fmt.Errorf("%s: Mode %v needs Config.Syncer", at, p.Mode)
	}
	if _, ok := store.Of(syncer).(store.StrictDecider); p.Mode == Strict && !ok {
		return fleet.Limit{}, fmt.Errorf("%s: Mode Strict needs a Config.Syncer that decides single requests, as global.Redis does; %T does not", at, syncer)
	}
	return lim, nil
}

// checkFields is checkPolicy but for p's needs of the Syncer.
func checkFields(at string, p *Policy) (fleet.Limit, error) {
	if p.Name != "" {
		at += fmt.Sprintf(" (%q)", p.Name)
	}
	if p.Name == "" {
		return fleet.Limit{}, fmt.Errorf("%s: Name is empty; every policy needs a name", at)
	}
	if p.Mode < Hybrid || p.Mode > Strict {
		return fleet.Limit{}, fmt.Errorf("%s: Mode %d is not a known mode", at, int(p.Mode))
	}
	if p.OnUnreachable < FailStatic || p.OnUnreachable > FailClosed {
		return fleet.Limit{}, fmt.Errorf("%s: OnUnreachable %d is not a known fail mode", at, int(p.OnUnreachable))
	}
	if p.Algorithm < local.TokenBucket || p.Algorithm > local.SlidingLog {
		return fleet.Limit{}, fmt.Errorf("%s: Algorithm %d is not a known algorithm", at, int(p.Algorithm))
	}
	if p.Rate != 0 {
		switch {
		case p.Algorithm != local.TokenBucket:
			return fleet.Limit{}, fmt.Errorf("%s: Rate is for TokenBucket; %v takes Limit and Window", at, p.Algorithm)
		case p.Limit != 0 || p.Window != 0:
			return fleet.Limit{}, fmt.Errorf("%s: Rate is set, so Limit and Window must be zero", at)
		case math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) || p.Rate < 1e-6 || p.Rate > 1e9:
			return fleet.Limit{}, fmt.Errorf("%s: Rate is %v; it must be between 1e-6 and 1e9 tokens per second", at, p.Rate)
		case p.Burst < 1:
			return fleet.Limit{}, fmt.Errorf("%s: Burst is %d; it must be at least 1 when Rate is set", at, p.Burst)
		}
		// A millisecond-grained limit keeps three significant digits of
		// a fractional rate and stays within global's one-millisecond
		// floor on windows.
		if r := p.Rate * 1000; r >= 1 {
			p.Limit, p.Window = int64(math.Round(r)), 1000*time.Second
		} else {
			p.Limit, p.Window = 1, time.Duration(math.Round(1e9/p.Rate))
		}
	}
	switch {
	case p.Limit < 1:
		return fleet.Limit{}, fmt.Errorf("%s: Limit is %d; it must be at least 1", at, p.Limit)
	case p.Window <= 0:
		return fleet.Limit{}, fmt.Errorf("%s: Window is %v; it must be positive", at, p.Window)
	case p.Burst < 0:
		return fleet.Limit{}, fmt.Errorf("%s: Burst is %d; it must not be negative", at, p.Burst)
	}
	burstField := "Burst"
	if p.Burst == 0 {
		p.Burst, burstField = p.Limit, "Limit" // the capacity the user set
	}
	if p.Mode == Local {
		return fleet.Limit{}, nil
	}
	if p.Algorithm != local.TokenBucket && p.Algorithm != local.SlidingWindow {
		return fleet.Limit{}, fmt.Errorf("%s: Algorithm %v is local only; a %v policy takes TokenBucket or SlidingWindow", at, p.Algorithm, p.Mode)
	}
	if p.Window < time.Millisecond {
		return fleet.Limit{}, fmt.Errorf("%s: Window is %v; a %v policy needs at least 1ms", at, p.Window, p.Mode)
	}
	if p.Burst > maxAllowance {
		return fleet.Limit{}, fmt.Errorf("%s: %s is %d; a %v policy's capacity is at most %d", at, burstField, p.Burst, p.Mode, int64(maxAllowance))
	}
	lim := fleet.Limit{Algorithm: p.Algorithm, Limit: p.Limit, Window: p.Window, Burst: p.Burst}
	if err := lim.Validate(); err != nil {
		return fleet.Limit{}, fmt.Errorf("%s: %w", at, err)
	}
	return lim, nil
}
