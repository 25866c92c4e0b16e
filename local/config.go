package local

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/internal/enumtext"
)

// ErrInvalidConfig is wrapped by every error New returns for a Config it
// refuses: errors.Is(err, ErrInvalidConfig) tells a bad Config from a
// failure to start. The message names the field and what it must be.
var ErrInvalidConfig = errors.New("local: invalid Config")

// An Algorithm chooses how a bucket decides.
type Algorithm int

const (
	// TokenBucket is GCRA, the generic cell rate algorithm: a bucket of
	// Burst tokens refilled at Limit per Window, kept as one theoretical
	// arrival time per key. It is the default and the fastest.
	TokenBucket Algorithm = iota

	// SlidingWindow is the sliding window counter: the counts of the current
	// and the previous window, the previous one weighted by how much of it
	// still overlaps the sliding window. Never more than Limit in an aligned
	// window; at most 2*Limit in any window of length Window under
	// adversarial arrivals, about Limit under smooth ones.
	SlidingWindow

	// FixedWindow counts requests per aligned window of length Window.
	// Cheapest to reason about, but a client can spend Limit at the end of
	// one window and Limit again at the start of the next.
	FixedWindow

	// SlidingLog keeps the times of the last Limit admissions per key and
	// is exact: never more than Limit in any window of length Window. It
	// costs 8*Limit bytes per active key and serialises requests per key.
	SlidingLog
)

// String returns the algorithm's name as used in benchmarks and flags.
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "gcra"
	case SlidingWindow:
		return "slidingwindow"
	case FixedWindow:
		return "fixedwindow"
	case SlidingLog:
		return "slidinglog"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

var algorithmNames = []enumtext.Name[Algorithm]{
	{Text: "gcra", Value: TokenBucket}, {Text: "tokenbucket", Value: TokenBucket},
	{Text: "slidingwindow", Value: SlidingWindow}, {Text: "fixedwindow", Value: FixedWindow},
	{Text: "slidinglog", Value: SlidingLog},
}

// MarshalText returns the algorithm's name, for config files; a value
// that is not an Algorithm is an error.
func (a Algorithm) MarshalText() ([]byte, error) {
	return enumtext.Marshal("local: Algorithm", a.String(), a >= TokenBucket && a <= SlidingLog)
}

// UnmarshalText sets a from its name: "gcra" (or "tokenbucket"),
// "slidingwindow", "fixedwindow" or "slidinglog", in any case, with or
// without '_' or '-'.
func (a *Algorithm) UnmarshalText(text []byte) error {
	v, err := enumtext.Parse("local: Algorithm", text, algorithmNames)
	if err == nil {
		*a = v
	}
	return err
}

// Defaults for the zero fields of a Config.
const (
	defaultMaxKeys   = 1 << 20 // the cap on live keys
	defaultMaxKeyLen = 256     // the longest key, in bytes
)

// Bounds checked by New.
const (
	// maxWindowLimit is the largest Limit the window algorithms can count
	// in one window.
	maxWindowLimit = math.MaxInt32
	// maxLogLimit is the largest Limit SlidingLog accepts: its memory is
	// 8 bytes per unit of Limit per key.
	maxLogLimit = 1 << 20
)

// Config describes a Limiter. The zero value of every optional field means
// its documented default.
type Config struct {
	// Algorithm is how each key's bucket decides. Default TokenBucket.
	Algorithm Algorithm

	// Limit is how many requests each key may make per Window. Required,
	// at least 1; at most 2^31-1 for the window algorithms, which count in
	// 32 bits, and 2^20 for SlidingLog, which keeps 8 bytes per unit of
	// Limit per key.
	Limit int64

	// Window is the period over which Limit applies. Required, positive.
	// For TokenBucket the refill rate is Limit/Window, one token every
	// Window/Limit (rounded up to whole nanoseconds, so never faster than
	// configured); rates above one token per nanosecond are refused.
	Window time.Duration

	// Rate is an alternative to Limit and Window for TokenBucket, in the
	// manner of golang.org/x/time/rate: tokens per second. When Rate is
	// set, Limit and Window must be zero; Burst is then required.
	Rate float64

	// Burst is the bucket size for TokenBucket: how many requests a full
	// bucket admits at once. Default Limit. Ignored by the window
	// algorithms, whose burst is Limit.
	Burst int64

	// MaxKeys caps the number of live keys, so that a flood of distinct
	// keys cannot exhaust memory. When a new key would pass it, idle keys
	// (those that would decide exactly as a new key) are removed to make
	// room; a key that has spent anything is never forgotten, so if none
	// is idle the new key gets ErrTooManyKeys. Default 2^20 (1,048,576).
	MaxKeys int

	// MaxKeyLen is the longest key accepted, in bytes; longer keys get
	// ErrKeyTooLong. Default 256.
	MaxKeyLen int

	// Clock is the time source. Default: the system clock, or in a
	// testing/synctest bubble the bubble's fake clock.
	Clock clock.Clock
}

// withDefaults validates c and returns it with its defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Algorithm < TokenBucket || c.Algorithm > SlidingLog {
		return c, fmt.Errorf("local: Config.Algorithm %d is not a known algorithm", int(c.Algorithm))
	}
	if c.Rate != 0 {
		if err := c.fromRate(); err != nil {
			return c, err
		}
	}
	if c.Burst == 0 {
		c.Burst = c.Limit
	}
	if err := checkLimits(c.Algorithm, c.Limit, c.Window, c.Burst); err != nil {
		return c, err
	}
	switch {
	case c.MaxKeys == 0:
		c.MaxKeys = defaultMaxKeys
	case c.MaxKeys < 0:
		return c, fmt.Errorf("local: Config.MaxKeys is %d; it must be positive (or 0 for the default %d)", c.MaxKeys, defaultMaxKeys)
	}
	switch {
	case c.MaxKeyLen == 0:
		c.MaxKeyLen = defaultMaxKeyLen
	case c.MaxKeyLen < 0:
		return c, fmt.Errorf("local: Config.MaxKeyLen is %d; it must be positive (or 0 for the default %d)", c.MaxKeyLen, defaultMaxKeyLen)
	}
	if c.Clock == nil {
		c.Clock = clock.Default()
	}
	return c, nil
}

// fromRate turns a Rate into the Limit per Window it stands for: one token
// per emission interval, rounded up to whole nanoseconds.
func (c *Config) fromRate() error {
	switch {
	case c.Algorithm != TokenBucket:
		return fmt.Errorf("local: Config.Rate is for TokenBucket; %v takes Limit and Window", c.Algorithm)
	case c.Limit != 0 || c.Window != 0:
		return fmt.Errorf("local: Config.Rate is set, so Config.Limit and Config.Window must be zero")
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("local: Config.Rate is %v; it must be a finite number of tokens per second", c.Rate)
	case c.Rate < 0:
		return fmt.Errorf("local: Config.Rate is %v; it must be positive", c.Rate)
	case c.Rate > 1e9:
		return fmt.Errorf("local: Config.Rate is %v; more than one token per nanosecond is not supported", c.Rate)
	case c.Rate < 1e-9:
		return fmt.Errorf("local: Config.Rate is %v; it must be at least one token per 1e9 seconds", c.Rate)
	case c.Burst == 0:
		return fmt.Errorf("local: Config.Burst must be set (at least 1) when Config.Rate is")
	}
	c.Limit, c.Window = 1, time.Duration(math.Ceil(1e9/c.Rate))
	return nil
}

// checkLimits validates a limit, window and burst for alg, naming the field
// at fault.
func checkLimits(alg Algorithm, limit int64, window time.Duration, burst int64) error {
	if limit < 1 {
		return fmt.Errorf("local: Config.Limit is %d; it must be at least 1", limit)
	}
	if window <= 0 {
		return fmt.Errorf("local: Config.Window is %v; it must be positive", window)
	}
	switch alg {
	case TokenBucket:
		if burst < 1 {
			return fmt.Errorf("local: Config.Burst is %d; it must be at least 1", burst)
		}
		if int64(window) < limit {
			return fmt.Errorf("local: Config.Limit %d per Window %v is faster than one token per nanosecond; use a longer Window or a lower Limit", limit, window)
		}
		t := emission(limit, window)
		if burst > math.MaxInt64/4/t {
			return fmt.Errorf("local: Config.Burst %d is too large for Limit %d per Window %v: the bucket would span more than %v", burst, limit, window, time.Duration(math.MaxInt64/4))
		}
	case SlidingWindow, FixedWindow:
		if limit > maxWindowLimit {
			return fmt.Errorf("local: Config.Limit %d is above %d, the most a window algorithm counts", limit, maxWindowLimit)
		}
	case SlidingLog:
		if limit > maxLogLimit {
			return fmt.Errorf("local: Config.Limit %d is above %d, the most SlidingLog keeps per key (8 bytes each)", limit, maxLogLimit)
		}
	}
	return nil
}

// emission is GCRA's emission interval: nanoseconds per token, rounded up
// so that rounding never makes the bucket faster than configured.
func emission(limit int64, window time.Duration) int64 {
	w := int64(window)
	return w/limit + min(w%limit, 1)
}
