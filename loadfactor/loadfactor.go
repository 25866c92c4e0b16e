// Package loadfactor moves a hybrid.Limiter's load factor by a signal of
// the backend's load: down within seconds when the backend struggles, up
// over minutes once it recovers, with hysteresis so that a signal that
// hovers does not make the limits flap.
//
// The signal is yours: the factor your backend can take now, from its
// latency, error rate, queue depth or CPU. For a latency target, the
// target over the measured p99 (capped at 1) is a good start.
package loadfactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Config configures Run. Defaults apply to zero fields.
type Config struct {
	// Limiter is the Limiter whose load factor moves. Required.
	Limiter *hybrid.Limiter
	// Policies names the policies the factor scales; none: every one.
	Policies []string
	// Signal returns the factor the backend's load calls for now, in
	// (0, 1]; values outside are clamped to [Floor, 1], and NaN is
	// ignored. It is called every Every, from Run's goroutine. Required.
	Signal func() float64
	// Every is how often the signal is read. Default 1s.
	Every time.Duration
	// Down is the least time the factor takes to fall from 1 to Floor:
	// it follows a lower signal at once, by at most (1-Floor)·Every/Down
	// a step. Default 5s.
	Down time.Duration
	// Up is the least time the factor takes to rise from Floor to 1,
	// once the signal is above it by more than Hysteresis. Default 5m.
	Up time.Duration
	// Hysteresis is how far above the factor the signal must be before
	// the factor rises. Default 0.05.
	Hysteresis float64
	// Floor is the lowest the factor goes. Default 0.1.
	Floor float64
	// Logger logs each change of the factor by more than a tenth, at
	// Info. Default: silent.
	Logger *slog.Logger
}

// ErrInvalidConfig is wrapped by Run's errors for a Config out of range.
var ErrInvalidConfig = errors.New("loadfactor: invalid Config")

func (c Config) withDefaults() (Config, error) {
	if c.Every == 0 {
		c.Every = time.Second
	}
	if c.Down == 0 {
		c.Down = 5 * time.Second
	}
	if c.Up == 0 {
		c.Up = 5 * time.Minute
	}
	if c.Hysteresis == 0 {
		c.Hysteresis = 0.05
	}
	if c.Floor == 0 {
		c.Floor = 0.1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Limiter == nil:
		return c, fmt.Errorf("%w: Limiter is nil", ErrInvalidConfig)
	case c.Signal == nil:
		return c, fmt.Errorf("%w: Signal is nil", ErrInvalidConfig)
	case c.Every < 0 || c.Down < 0 || c.Up < 0:
		return c, fmt.Errorf("%w: Every, Down and Up must be positive (or 0 for their defaults)", ErrInvalidConfig)
	case !(c.Floor > 0 && c.Floor <= 1):
		return c, fmt.Errorf("%w: Floor is %v; it must be more than 0 and at most 1", ErrInvalidConfig, c.Floor)
	case !(c.Hysteresis >= 0 && c.Hysteresis < 1):
		return c, fmt.Errorf("%w: Hysteresis is %v; it must be from 0 to less than 1", ErrInvalidConfig, c.Hysteresis)
	}
	return c, nil
}

// Run reads the signal every Every and moves the load factor of the
// Limiter's policies toward it (hybrid.Limiter.SetLoadFactor), until ctx
// is done; it returns ctx's error, or the first error of a Config out of
// range or of SetLoadFactor (a policy that is not the Limiter's). It
// starts from factor 1, and leaves the factor where it is when it
// returns. Run blocks: call it in a goroutine of your own.
func Run(ctx context.Context, cfg Config) error {
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	f, logged := 1.0, 1.0
	t := time.NewTicker(c.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		next := c.step(f, c.Signal())
		if next == f {
			continue
		}
		if err := c.Limiter.SetLoadFactor(next, c.Policies...); err != nil {
			return err
		}
		f = next
		if math.Abs(f-logged) >= 0.1 || f == 1 && logged != 1 {
			c.Logger.Info("loadfactor: load factor changed", "factor", math.Round(f*1000)/1000)
			logged = f
		}
	}
}

// step is the factor after f, one Every on, with the signal at want.
func (c Config) step(f, want float64) float64 {
	if math.IsNaN(want) {
		return f
	}
	want = min(max(want, c.Floor), 1)
	span := 1 - c.Floor
	switch {
	case want < f:
		return max(want, f-span*c.Every.Seconds()/c.Down.Seconds())
	case want > f+c.Hysteresis || want == 1 && f < 1 && f+c.Hysteresis >= 1:
		return min(want, f+span*c.Every.Seconds()/c.Up.Seconds())
	}
	return f
}
