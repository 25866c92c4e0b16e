package hybrid

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/sketch"
)

// The keys refused most lately, for an operator looking for abuse or a
// limit set too low: counted by the sync loop from each key's refusal
// count, so the request path pays nothing, into two Space-Saving
// sketches of a minute each (the one filling and the last full one), in
// memory bounded by topCounters whatever the number of keys.
const (
	topWindow   = time.Minute
	topCounters = 64
	topKeys     = 10
)

// RefusedKey is one of the keys refused most over the last minute or
// two (see Stats.TopRefused).
type RefusedKey struct {
	Key string
	// Refused is how many requests it had refused, an estimate that is
	// never under the true count and over it by at most Err (the
	// sketch's bound: the refusals of keys it dropped to make room).
	Refused, Err uint64
}

// refusals counts refusals by key. Sync loop only, but for top.
type refusals struct {
	cur, prev *sketch.SpaceSaving
	since     int64                        // when cur began
	fresh     bool                         // refusals noted since the last publish
	top       atomic.Pointer[[]RefusedKey] // the last published, for Stats
}

// noteRefused counts n refusals of key. Sync loop only.
func (l *Limiter) noteRefused(key string, n uint64) {
	if n == 0 {
		return
	}
	r := &l.refusals
	if r.cur == nil {
		r.cur, r.prev = sketch.NewSpaceSaving(topCounters), sketch.NewSpaceSaving(topCounters)
	}
	r.cur.Add(key, n)
	r.fresh = true
}

// publishRefused starts a new window when the current one is full, and
// publishes the keys refused most over the two for Stats. Sync loop only.
func (l *Limiter) publishRefused(now int64) {
	r := &l.refusals
	if r.cur == nil {
		return
	}
	if now-r.since >= int64(topWindow) {
		r.prev.Reset()
		r.cur, r.prev, r.since = r.prev, r.cur, now
		r.fresh = true
	}
	if !r.fresh {
		return // nothing new: the published top stands, and a round allocates nothing for it
	}
	r.fresh = false
	byKey := map[string]*RefusedKey{}
	for _, s := range []*sketch.SpaceSaving{r.prev, r.cur} {
		for _, it := range s.Top(topCounters) {
			k := byKey[it.Key]
			if k == nil {
				k = &RefusedKey{Key: it.Key}
				byKey[it.Key] = k
			}
			k.Refused += it.Count
			k.Err += it.Err
		}
	}
	top := make([]RefusedKey, 0, len(byKey))
	for _, k := range byKey {
		top = append(top, *k)
	}
	slices.SortFunc(top, func(a, b RefusedKey) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(a.Key, b.Key))
	})
	top = top[:min(len(top), topKeys)]
	r.top.Store(&top)
}

// topRefused is the last published top, for Stats.
func (l *Limiter) topRefused() []RefusedKey {
	if p := l.refusals.top.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}
