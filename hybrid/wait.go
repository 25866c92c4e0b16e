package hybrid

import (
	"context"
	"fmt"

	"github.com/hybridlimit/hybridlimit/local"
)

// lookup returns key's policy and, unless the policy's local.Limiter
// holds the key (see localPolicy), its state.
func (l *Limiter) lookup(key string) (*policy, *keyState, error) {
	if p := l.localPolicy(key); p != nil {
		if len(key) > l.cfg.MaxKeyLen {
			return nil, nil, ErrKeyTooLong
		}
		return p, nil, nil
	}
	k, err := l.state(key)
	if err != nil {
		return nil, nil, err
	}
	return k.policy(), k, nil
}

// state returns key's state, resolving a key seen for the first time.
func (l *Limiter) state(key string) (*keyState, error) {
	for {
		if k, ok := l.keys.Load(key); ok {
			return k, nil
		}
		if _, err := l.allowNew(key, noTime, 0, nil); err != nil {
			return nil, err
		}
	}
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n requests for key are admitted, ctx is done, or it
// is clear they cannot be before ctx's deadline. It returns nil once they
// are admitted.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return err // as golang.org/x/time/rate: a done context takes nothing
		}
		if p := l.localPolicy(key); p != nil && !p.Shadow && len(key) <= l.cfg.MaxKeyLen {
			return localErr(p.local.WaitN(ctx, key, n))
		}
		if k, ok := l.keys.Load(key); ok {
			if p := k.policy(); p.Mode == Local && !p.Shadow {
				return localErr(p.local.WaitN(ctx, key, n))
			}
		}
		d, err := l.AllowNContext(ctx, key, n)
		if err != nil {
			return err
		}
		if d.Allowed() {
			return nil
		}
		wait := d.RetryAfter()
		if wait == local.Never {
			return fmt.Errorf("hybrid: WaitN(%q, %d): the cost exceeds the policy's limit %d", key, n, d.Limit())
		}
		if dl, ok := ctx.Deadline(); ok && l.clk.Now().Add(wait).After(dl) {
			return fmt.Errorf("hybrid: WaitN(%q, %d): would wait %v, past the context's deadline", key, n, wait)
		}
		t := l.clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}
