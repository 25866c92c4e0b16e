package local

import (
	"math"
	"sync"
	"sync/atomic"
)

// The key map is sharded by the top bits of the key's xxhash. Each shard is
// an open-addressing table of atomic entry pointers: readers find an
// existing key with atomic loads only (no lock, no allocation); writers
// (new keys, sweeps, resizes) serialise on the shard's mutex and publish a
// grown table with one atomic store, so a reader still walking an old
// table sees the same *entry values.
//
// The map never holds more than maxKeys entries, and it only ever forgets
// a key that is idle: one whose bucket would decide every future request
// exactly as a new key's would. Forgetting any other key would hand it a
// fresh bucket, so when the map is full and nothing is idle a new key is
// refused with ErrTooManyKeys instead.
//
// Finding what is idle must stay cheap when nothing is, or a flood of new
// keys against a full map would scan it once per request. Each shard
// therefore keeps idleAt, a lower bound on when the first of its keys can
// become idle: a sweep sets it to the earliest time any key it kept could
// be idle, and anything that can bring that time forward lowers it (a new
// key's first decision, a resize, a cancelled reservation). Decisions on an
// existing key only push its idle time later, so they need not touch it. A
// full map sweeps only the shards whose idleAt has passed, and refuses a
// new key after one atomic load per shard when none has.

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
	mu     sync.Mutex
	tab    atomic.Pointer[table]
	live   int          // entries present, under mu
	used   int          // entries plus tombstones, under mu
	idleAt atomic.Int64 // no entry is idle before this time; written under mu
	_      [64]byte
}

type keyMap struct {
	shards  [numShards]shard
	maxKeys int64
	_       [64]byte
	count   atomic.Int64 // live entries in all shards
}

func (m *keyMap) init(maxKeys int) {
	m.maxKeys = int64(maxKeys)
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
	// now returns the current time, nanoseconds since the epoch.
	now() int64
	// sweepTime returns the time to sweep at, nanoseconds since the
	// epoch, and makes every later decision happen no earlier: an entry
	// idle then is idle for every decision that follows.
	sweepTime() int64
	// retireIdle retires e's bucket if it is idle at now and reports
	// whether it did; if not, idleAt is the earliest time it could be.
	retireIdle(e *entry, now int64) (retired bool, idleAt int64)
	// retire retires e's bucket whatever its state.
	retire(e *entry)
	// params returns the configured parameters, for a new entry; read
	// under the shard lock, so that a Resize that has passed the shard
	// never misses an entry made with the old ones.
	params() *params
}

// insert returns key's entry, creating it with a bucket of the
// configured parameters (s.params) if absent; created reports whether it did. When the map is full it first
// sweeps the shards where a key may have become idle, and if that frees
// nothing it returns ErrTooManyKeys and stores nothing.
//
// The caller of a created entry reports its idle time after its first
// decision (noteIdle), since until then it is as idle as an absent key.
func (m *keyMap) insert(h uint64, key string, s sweeper) (e *entry, created bool, err error) {
	sh := m.shardFor(h)
	for swept := false; ; swept = true {
		sh.mu.Lock()
		if e := sh.tab.Load().lookup(h, key); e != nil {
			sh.mu.Unlock()
			return e, false, nil
		}
		if m.reserve() {
			e := sh.addLocked(h, key, s.params())
			sh.mu.Unlock()
			return e, true, nil
		}
		sh.mu.Unlock()
		if swept || m.makeRoom(s) == 0 {
			return nil, false, ErrTooManyKeys
		}
	}
}

// reserve counts one more entry if the map has room for it.
func (m *keyMap) reserve() bool {
	for {
		n := m.count.Load()
		if n >= m.maxKeys {
			return false
		}
		if m.count.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// addLocked stores a new entry for key, which the shard does not hold.
func (sh *shard) addLocked(h uint64, key string, p *params) *entry {
	t := sh.tab.Load()
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

// makeRoom sweeps every shard where a key may have become idle and
// returns how many keys went. When none may have, it costs one atomic
// load per shard and writes nothing.
func (m *keyMap) makeRoom(s sweeper) int {
	if m.nextIdle() > s.now() {
		return 0
	}
	now := s.sweepTime()
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		if sh.idleAt.Load() > now {
			continue
		}
		sh.mu.Lock()
		if sh.idleAt.Load() <= now { // not swept meanwhile by another new key
			n += m.sweepLocked(sh, s, now)
		}
		sh.mu.Unlock()
	}
	return n
}

// nextIdle returns the earliest time a held key could become idle, as far
// as the shards know.
func (m *keyMap) nextIdle() int64 {
	next := int64(math.MaxInt64)
	for i := range m.shards {
		next = min(next, m.shards[i].idleAt.Load())
	}
	return next
}

// noteIdle records that a key in h's shard may be idle from at: its first
// decision, or a change that can only bring its idle time forward.
func (m *keyMap) noteIdle(h uint64, at int64) { m.shardFor(h).lowerIdle(at) }

// lowerIdle lowers the shard's idleAt to at, taking the lock only when
// that changes it.
func (sh *shard) lowerIdle(at int64) {
	if sh.idleAt.Load() <= at {
		return
	}
	sh.mu.Lock()
	sh.lowerIdleLocked(at)
	sh.mu.Unlock()
}

func (sh *shard) lowerIdleLocked(at int64) {
	if at < sh.idleAt.Load() {
		sh.idleAt.Store(at)
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
func (m *keyMap) removeLocked(sh *shard, t *table, i int, e *entry) {
	e.b.Store(nil)
	t.slots[i].Store(tombstone)
	sh.live--
	m.count.Add(-1)
}

// sweepLocked removes the shard's idle entries at now, sets its idleAt to
// the earliest time one of those it kept could be idle, and reports how
// many went.
func (m *keyMap) sweepLocked(sh *shard, s sweeper, now int64) int {
	t := sh.tab.Load()
	n := 0
	next := int64(math.MaxInt64)
	for i := range t.slots {
		e := t.slots[i].Load()
		if e == nil || e == tombstone {
			continue
		}
		retired, at := s.retireIdle(e, now)
		if !retired {
			next = min(next, at)
			continue
		}
		m.removeLocked(sh, t, i, e)
		n++
	}
	sh.idleAt.Store(next)
	if sh.used-sh.live > len(t.slots)/4 {
		sh.rehashLocked()
	}
	return n
}

// each calls f with every entry, each shard's under its lock.
func (m *keyMap) each(f func(sh *shard, e *entry)) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		for j := range t.slots {
			if e := t.slots[j].Load(); e != nil && e != tombstone {
				f(sh, e)
			}
		}
		sh.mu.Unlock()
	}
}

// withEntry calls f with key's entry under the shard lock and reports
// whether the key was present.
func (m *keyMap) withEntry(h uint64, key string, f func(sh *shard, e *entry)) bool {
	sh := m.shardFor(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.tab.Load().lookup(h, key)
	if e == nil || e.b.Load() == nil {
		return false
	}
	f(sh, e)
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
			m.removeLocked(sh, t, int(i), e)
			return true
		}
	}
}

// sweep removes idle entries from every shard and reports how many went.
func (m *keyMap) sweep(s sweeper) int {
	now := s.sweepTime()
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += m.sweepLocked(sh, s, now)
		sh.mu.Unlock()
	}
	return n
}

// len returns the number of live keys.
func (m *keyMap) len() int { return int(m.count.Load()) }
