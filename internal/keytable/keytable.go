// Package keytable is a concurrent map from string keys to pointers,
// made for a limiter's table of keys: a lookup takes no lock, allocates
// nothing and costs about what a plain Go map's does, one probe of an
// array of hashes and pointers and a look at the value's own key, where
// sync.Map walks a trie of several nodes (at a million keys a lookup
// missed the CPU's caches some five times, and a decision cost 6-8
// times a map lookup). Writes take a mutex: a limiter adds and forgets
// keys far less often than it looks them up.
//
// The table is open addressing with linear probing over a power-of-two
// array of slots, each a hash and a pointer, kept at most three
// quarters full (counting deleted slots), at most half just after it
// grows: a lookup ends at the first empty slot. (Kept at most half full
// and grown to a quarter, a million keys' slots took 64 MB; half of that
// now, for the same lookups within the machine's noise, and 42 bytes a
// key less in BenchmarkMemoryPerKey.) Keys
// are hashed with hash/maphash under a seed of the table's own, so that
// the keys clients choose (API keys, IPs) cannot be chosen to collide.
// Growing builds a new array under the mutex and publishes it whole;
// readers on the old one see every key it held.
package keytable

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Table maps strings to *V, each value holding its own key (keyOf).
// It is safe for concurrent use. The zero Table is not usable: use New.
type Table[V any] struct {
	keyOf func(*V) string
	seed  maphash.Seed
	tomb  *V // a deleted slot's value: lookups go past it, inserts reuse it

	mu   sync.Mutex // held by writers
	cur  atomic.Pointer[slots[V]]
	live atomic.Int64
}

// slots is one generation of the table's array.
type slots[V any] struct {
	s    []slot[V]
	mask uint64
	used int // slots holding a value or a tomb; under Table.mu
}

// slot is a key's place: its hash, written before the value that
// publishes it, so that a reader that sees the value sees its hash.
type slot[V any] struct {
	hash atomic.Uint64
	val  atomic.Pointer[V]
}

// minSlots is the smallest array a table holds.
const minSlots = 16

// New returns an empty table whose values name their keys by keyOf. V
// must not be of size zero: its values are told apart by address, and
// Go gives every zero-size value the same.
func New[V any](keyOf func(*V) string) *Table[V] {
	if unsafe.Sizeof(*new(V)) == 0 {
		panic("keytable: New of a zero-size type")
	}
	t := &Table[V]{keyOf: keyOf, seed: maphash.MakeSeed(), tomb: new(V)}
	t.cur.Store(newSlots[V](minSlots))
	return t
}

func newSlots[V any](n int) *slots[V] {
	return &slots[V]{s: make([]slot[V], n), mask: uint64(n - 1)}
}

// Len is how many keys the table holds.
func (t *Table[V]) Len() int { return int(t.live.Load()) }

// Load returns the value for key, if the table holds one.
func (t *Table[V]) Load(key string) (*V, bool) {
	h := maphash.String(t.seed, key)
	s := t.cur.Load()
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		sl := &s.s[i]
		v := sl.val.Load()
		if v == nil {
			return nil, false
		}
		if v != t.tomb && sl.hash.Load() == h && t.keyOf(v) == key {
			return v, true
		}
	}
}

// LoadOrStore returns the value for v's key if the table holds one
// (loaded true); otherwise it stores v and returns it.
func (t *Table[V]) LoadOrStore(v *V) (actual *V, loaded bool) {
	key := t.keyOf(v)
	h := maphash.String(t.seed, key)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.cur.Load()
	free := -1 // the first tomb on the key's probe, to reuse
	i := h & s.mask
	for ; ; i = (i + 1) & s.mask {
		sl := &s.s[i]
		old := sl.val.Load()
		if old == nil {
			break
		}
		if old == t.tomb {
			if free < 0 {
				free = int(i)
			}
			continue
		}
		if sl.hash.Load() == h && t.keyOf(old) == key {
			return old, true
		}
	}
	if free >= 0 {
		i = uint64(free)
	} else {
		if 4*(s.used+1) > 3*len(s.s) {
			s = t.grow(s)
			t.put(s, h, v)
			t.live.Add(1)
			return v, false
		}
		s.used++
	}
	s.s[i].hash.Store(h)
	s.s[i].val.Store(v)
	t.live.Add(1)
	return v, false
}

// grow publishes a new array holding s's values, sized for the keys
// there are (so that it also shrinks, and sheds the tombs), with room
// for one more. Under t.mu.
func (t *Table[V]) grow(s *slots[V]) *slots[V] {
	n := minSlots
	for n < 2*(int(t.live.Load())+1) {
		n *= 2
	}
	ns := newSlots[V](n)
	for i := range s.s {
		if v := s.s[i].val.Load(); v != nil && v != t.tomb {
			t.put(ns, s.s[i].hash.Load(), v)
		}
	}
	t.cur.Store(ns)
	return ns
}

// put stores v, hashed h, in the first empty slot of its probe in s,
// which holds no tomb and is not yet published or is under t.mu.
func (t *Table[V]) put(s *slots[V], h uint64, v *V) {
	i := h & s.mask
	for s.s[i].val.Load() != nil {
		i = (i + 1) & s.mask
	}
	s.s[i].hash.Store(h)
	s.s[i].val.Store(v)
	s.used++
}

// CompareAndDelete deletes v's key if the table maps it to v, and
// reports whether it did.
func (t *Table[V]) CompareAndDelete(v *V) bool {
	key := t.keyOf(v)
	h := maphash.String(t.seed, key)
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.cur.Load()
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		old := s.s[i].val.Load()
		if old == nil {
			return false
		}
		if old == v {
			s.s[i].val.Store(t.tomb)
			t.live.Add(-1)
			if int(t.live.Load()) < len(s.s)/16 && len(s.s) > minSlots {
				t.grow(s) // a table emptied of most of its keys gives back its array
			}
			return true
		}
	}
}

// Range calls f for each value in the table until f returns false. It
// holds no lock, so f may add and delete keys; like sync.Map's Range,
// it is no snapshot: it visits each key held from its start to its end
// once, and may or may not visit one added or deleted meanwhile. Unlike
// sync.Map's, it may visit a key deleted and added again meanwhile
// twice, each time with the value it held then.
//
// Growing or shrinking copies the table under the writers' mutex: at a
// million keys, new keys and deletions wait some milliseconds for it,
// once in a million additions; lookups and Range never wait.
func (t *Table[V]) Range(f func(*V) bool) {
	s := t.cur.Load()
	for i := range s.s {
		if v := s.s[i].val.Load(); v != nil && v != t.tomb && !f(v) {
			return
		}
	}
}
