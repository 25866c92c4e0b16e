package rules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ErrConflict is wrapped by Publish's error when another version was
// saved since the one the change was made to: make it again to that one.
var ErrConflict = errors.New("rules: the fleet's rules changed since they were read")

// Store holds a rules document a fleet shares, with a version that only
// goes up: any node saves it, every node follows it.
// global.Redis.Document is one.
type Store interface {
	// Load returns the stored document and its version (nil and 0 if
	// none); if the stored version is have, it may return nil and have.
	Load(ctx context.Context, have uint64) ([]byte, uint64, error)
	// Save stores doc as the version after prev, and returns it; if
	// another was saved since prev, it stores nothing and fails,
	// returning the stored version.
	Save(ctx context.Context, doc []byte, prev uint64) (uint64, error)
}

// Follow applies the rules of store's document each time its version
// rises, checking every interval (250 ms if 0 or less), until ctx is
// done, and returns ctx's error. If the store holds no document yet, it
// saves the rules in force as the first version, so that the first node
// to start seeds the fleet, and every node after takes the fleet's rules
// over its own file. A version that cannot be parsed or applied is
// logged once, at Error, and skipped: the rules in force stay until a
// newer one. A version lower than one applied is never applied, so a
// node never goes back to older rules. A nil logger logs nothing.
//
// Run it in a goroutine of your own, like Watch; a node follows a store
// or watches a file, not both.
func (r *Limiter) Follow(ctx context.Context, store Store, interval time.Duration, logger *slog.Logger) error {
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var failed string // the last error logged, so that an outage logs once
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.follow(ctx, store, logger); err != nil && err.Error() != failed {
			failed = err.Error()
			logger.Error("rules: cannot follow the fleet's rules; the rules in force stay", "err", err)
		} else if err == nil {
			failed = ""
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// follow loads store's document once and applies it if it is newer.
func (r *Limiter) follow(ctx context.Context, store Store, logger *slog.Logger) error {
	have := r.version.Load()
	doc, v, err := store.Load(ctx, have)
	switch {
	case err != nil:
		return err
	case v == 0:
		v, err := store.Save(ctx, r.Rules().Source(), 0)
		if err != nil {
			return nil // another node seeded it first: the next load takes theirs
		}
		r.version.Store(v)
		logger.Info("rules: seeded the fleet's rules", "version", v)
		return nil
	case v <= have || doc == nil:
		return nil
	}
	r.fleetMu.Lock()
	defer r.fleetMu.Unlock()
	if v <= r.version.Load() {
		return nil // Publish applied this one, or a later one, meanwhile
	}
	r.version.Store(v) // a version refused is not tried again
	s, err := Parse("fleet", doc)
	if err == nil {
		err = r.Apply(s)
	}
	if err != nil {
		logger.Error("rules: the fleet's rules refused; the rules in force stay", "version", v, "err", err)
		return nil
	}
	logger.Info("rules: the fleet's rules applied", "version", v, "policies", len(s.policies))
	return nil
}

// Version returns the version of the fleet's rules last applied by
// Follow or Publish, 0 if none.
func (r *Limiter) Version() uint64 { return r.version.Load() }

// Publish checks doc as a rules file, saves it to store as the version
// after prev, and applies it here, so that every node following store
// applies it next. It returns the new version. A document that does not
// parse is neither saved nor applied; when another version was saved
// since prev, nothing is, and Publish returns that version with an error
// wrapping ErrConflict (make the change again to it). A document the
// Limiter refuses once saved (a Strict rule without a Redis fleet) is an
// error too, but not ErrConflict: it is the fleet's latest version.
func (r *Limiter) Publish(ctx context.Context, store Store, doc []byte, prev uint64) (uint64, error) {
	s, err := Parse("fleet", doc)
	if err != nil {
		return 0, err
	}
	r.fleetMu.Lock()
	defer r.fleetMu.Unlock()
	v, err := store.Save(ctx, doc, prev)
	if err != nil {
		if v > prev {
			return v, fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return v, err
	}
	r.version.Store(v)
	return v, r.Apply(s)
}
