package hybrid

import (
	"context"
	"errors"
	"fmt"

	"github.com/hybridlimit/hybridlimit/internal/store"
)

// Reset forgets what key has spent, on this node and, through the
// Syncer, for the whole fleet: the store's state of the key (and of its
// shards, if split) is deleted and this node's is dropped, so that its
// next request starts from a full bucket. It is for support: a customer
// locked out by a client gone wrong. Other nodes keep what they hold on
// leases of the key until their next sync (at most an Interval's share),
// and their Local buckets: call Reset on every node for those. An error
// is the store's, or, for a Syncer that cannot reset a key (gossip), one
// wrapping errors.ErrUnsupported once this node's state is reset. It is
// safe for concurrent use.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if p := l.localPolicy(key); p != nil {
		p.local.Delete(key)
		return nil
	}
	// Under the sync lock, so that no sync of this node reports the key's
	// old spending to the store between the two.
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	k, held := l.keys.Load(key)
	p := l.resolve(l.policies(), key)
	if held {
		p = k.policy()
		if p.local != nil {
			p.local.Delete(key) // a Local key's bucket, or a fail-static one
		}
		l.forget(k)
	}
	if p == nil || p.Mode == Local {
		return nil
	}
	if r, ok := store.Of(l.cfg.Syncer).(store.Resetter); ok {
		return r.Reset(ctx, key)
	}
	return fmt.Errorf("hybrid: Reset(%q): the Syncer (%T) cannot reset a key for the fleet; this node's state is reset: %w", key, l.cfg.Syncer, errors.ErrUnsupported)
}
