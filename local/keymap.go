package local

import (
	"slices"
	"sync"
	"sync/atomic"
)

// The key map is sharded by the top bits of the key's xxhash. Each shard is
// an open-addressing table of atomic entry pointers: readers find an
// existing key with atomic loads only (no lock, no allocation); writers
// (new keys, sweeps, evictions, resizes) serialise on the shard's mutex and
// publish a grown table with one atomic store, so a reader still walking an
// old table sees the same *entry values.

const (
	shardBits = 6
	numShards = 1 << shardBits
	minTable  = 8
)

// entry is one key's slot. Its bucket pointer is nil once the key has been
// removed; a reader that sees nil goes the slow way and re-inserts.
//
// A new entry's bucket is the one inside it, so the entry, its key header
// and its state share one 64-byte allocation and one cache line: with a
// million keys, a lookup misses the cache once fewer. A resize points b at
// a separately allocated bucket.
type entry struct {
	key    string
	seen   atomic.Int64 // coarse time of last use, for LRU eviction
	b      atomic.Pointer[bucket]
	inline bucket
}

// tombstone marks a deleted slot so probes keep walking past it.
var tombstone = &entry{}

type table struct {
	slots []atomic.Pointer[entry]
	mask  uint64
}

type shard struct {
	mu   sync.Mutex
	tab  atomic.Pointer[table]
	live int // entries present, under mu
	used int // entries plus tombstones, under mu
	_    [64]byte
}

type keyMap struct {
	shards   [numShards]shard
	perShard int // cap on live entries per shard
}

func (m *keyMap) init(maxKeys int) {
	m.perShard = max(1, (maxKeys+numShards-1)/numShards)
	for i := range m.shards {
		m.shards[i].tab.Store(newTable(minTable))
	}
}

func newTable(size int) *table {
	return &table{slots: make([]atomic.Pointer[entry], size), mask: uint64(size - 1)}
}

func (m *keyMap) shardFor(h uint64) *shard { return &m.shards[h>>(64-shardBits)] }

// lookup finds key without locking. It may miss a key inserted after the
// table it read was replaced; callers then take the slow path.
func (t *table) lookup(h uint64, key string) *entry {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i].Load()
		if e == nil {
			return nil
		}
		if e != tombstone && e.key == key {
			return e
		}
	}
}

// sweeper decides, under the shard lock, whether an entry can go.
type sweeper interface {
	// retireIdle retires e's bucket if it is idle (full, or holding nothing
	// that matters) and reports whether it did.
	retireIdle(e *entry) bool
	// retire retires e's bucket whatever its state.
	retire(e *entry)
}

// insert returns key's entry, creating it with a bucket of parameters p if
// absent. s makes room when the shard is at its cap.
func (m *keyMap) insert(h uint64, key string, p *params, s sweeper) *entry {
	sh := m.shardFor(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if e := t.lookup(h, key); e != nil {
		return e
	}
	if sh.live >= m.perShard {
		sh.sweepLocked(s, false)
		if sh.live >= m.perShard {
			sh.evictLocked(s, max(1, m.perShard/16))
		}
	}
	if (sh.used+1)*4 > len(t.slots)*3 {
		t = sh.rehashLocked()
	}
	e := &entry{key: key}
	e.inline.init(p)
	e.b.Store(&e.inline)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		old := t.slots[i].Load()
		if old == nil || old == tombstone {
			t.slots[i].Store(e)
			sh.live++
			if old == nil {
				sh.used++
			}
			return e
		}
	}
}

// rehashLocked replaces the shard's table with one sized for its live
// entries, dropping tombstones.
func (sh *shard) rehashLocked() *table {
	old := sh.tab.Load()
	size := minTable
	for size < (sh.live+1)*2 { // at most half full after a rehash
		size *= 2
	}
	t := newTable(size)
	for i := range old.slots {
		e := old.slots[i].Load()
		if e == nil || e == tombstone {
			continue
		}
		for j := hashKey(e.key) & t.mask; ; j = (j + 1) & t.mask {
			if t.slots[j].Load() == nil {
				t.slots[j].Store(e)
				break
			}
		}
	}
	sh.used = sh.live
	sh.tab.Store(t)
	return t
}

// removeLocked deletes the entry at slot i, whose bucket is already
// retired.
func (sh *shard) removeLocked(t *table, i int, e *entry) {
	e.b.Store(nil)
	t.slots[i].Store(tombstone)
	sh.live--
}

// sweepLocked removes idle entries, or all entries when all is set, and
// reports how many went.
func (sh *shard) sweepLocked(s sweeper, all bool) int {
	t := sh.tab.Load()
	n := 0
	for i := range t.slots {
		e := t.slots[i].Load()
		if e == nil || e == tombstone {
			continue
		}
		if all {
			s.retire(e)
		} else if !s.retireIdle(e) {
			continue
		}
		sh.removeLocked(t, i, e)
		n++
	}
	return n
}

// evictLocked removes the k least recently used entries.
func (sh *shard) evictLocked(s sweeper, k int) {
	t := sh.tab.Load()
	seen := make([]int64, 0, sh.live)
	for i := range t.slots {
		if e := t.slots[i].Load(); e != nil && e != tombstone {
			seen = append(seen, e.seen.Load())
		}
	}
	if len(seen) == 0 {
		return
	}
	slices.Sort(seen)
	cut := seen[min(k, len(seen))-1]
	for i := range t.slots {
		if k == 0 {
			return
		}
		e := t.slots[i].Load()
		if e == nil || e == tombstone || e.seen.Load() > cut {
			continue
		}
		s.retire(e)
		sh.removeLocked(t, i, e)
		k--
	}
}

// withEntry calls f with key's entry under the shard lock and reports
// whether the key was present.
func (m *keyMap) withEntry(h uint64, key string, f func(e *entry)) bool {
	sh := m.shardFor(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.tab.Load().lookup(h, key)
	if e == nil || e.b.Load() == nil {
		return false
	}
	f(e)
	return true
}

// delete removes key, reporting whether it was present.
func (m *keyMap) delete(h uint64, key string, s sweeper) bool {
	sh := m.shardFor(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i].Load()
		if e == nil {
			return false
		}
		if e != tombstone && e.key == key {
			s.retire(e)
			sh.removeLocked(t, int(i), e)
			return true
		}
	}
}

// sweep removes idle entries from every shard and reports how many went.
func (m *keyMap) sweep(s sweeper) int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.sweepLocked(s, false)
		if sh.used-sh.live > len(sh.tab.Load().slots)/4 {
			sh.rehashLocked()
		}
		sh.mu.Unlock()
	}
	return n
}

// len returns the number of live keys.
func (m *keyMap) len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}
