package hybrid

import (
	"context"
	"time"
	"unsafe"
)

// NodesOf is how many active nodes key's last grant on l reported; 0 if
// l does not track key or has had no grant for it.
func NodesOf(l *Limiter, key string) int {
	return ofKey(l, key, func(k *keyState) int { return int(k.nodes) })
}

// ofKey is f of key's state under the sync lock; zero if l does not
// track key.
func ofKey[T any](l *Limiter, key string, f func(*keyState) T) T {
	k, ok := l.keys.Load(key)
	if !ok {
		var zero T
		return zero
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return f(k)
}

// DefaultHotKeyShards is Config.HotKeyShards's default, for the tests
// that count a hot key's shards.
const DefaultHotKeyShards = defaultHotKeyShards

// SyncEarly and EarlyGap are the simulator's early-sync hooks
// (internal/manual), for the tests that drive early syncs.
func (l *Limiter) SyncEarly(ctx context.Context) error { return l.syncWaiting(ctx) }
func (l *Limiter) EarlyGap() time.Duration             { return time.Duration(l.earlyGap()) }

// KeyStateSize is the size of a key's state, for the benchmarks that
// compare a decision with a map lookup over values as large.
const KeyStateSize = unsafe.Sizeof(keyState{})

// WalkLen is how many entries the sync loop's walk holds, forgotten
// keys' included until it is compacted (walk.go).
func (l *Limiter) WalkLen() int {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return len(l.syncs.walk.entries)
}

// InboxLen is how many keys made wait for the sync loop's next round
// (walk.go).
func (l *Limiter) InboxLen() int {
	l.inbox.mu.Lock()
	defer l.inbox.mu.Unlock()
	return len(l.inbox.fresh)
}

// ParkedFor is how long the sync loop's walk passes over key from the
// Limiter's now: 0 if it looks at key next round, or does not hold it
// (walk.go).
func (l *Limiter) ParkedFor(key string) time.Duration {
	k, ok := l.keys.Load(key)
	if !ok {
		return 0
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	w := &l.syncs.walk
	if i := int(k.walkIdx); i < len(w.entries) && w.entries[i].k == k {
		return time.Duration(max(0, w.entries[i].until-l.now()))
	}
	return 0
}

// ForecastOf is the requests a second l forecasts for key: 0 if l does
// not track it.
func (l *Limiter) ForecastOf(key string) float64 {
	return ofKey(l, key, func(k *keyState) float64 { return k.rate })
}
