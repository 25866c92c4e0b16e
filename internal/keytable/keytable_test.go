package keytable

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type entry struct {
	key string
	n   int
}

func newTable() *Table[entry] { return New(func(e *entry) string { return e.key }) }

// check requires t to hold exactly model, by Load, Range and Len.
func check(t *testing.T, tab *Table[entry], model map[string]*entry) {
	t.Helper()
	require.Equal(t, len(model), tab.Len())
	for k, want := range model {
		got, ok := tab.Load(k)
		require.True(t, ok, "key %q", k)
		require.Same(t, want, got, "key %q", k)
	}
	seen := map[string]bool{}
	tab.Range(func(e *entry) bool {
		require.False(t, seen[e.key], "visited twice: %q", e.key)
		seen[e.key] = true
		require.Same(t, model[e.key], e, "key %q", e.key)
		return true
	})
	require.Len(t, seen, len(model))
}

func TestTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		keys int
		del  func(i int) bool // which of the keys are deleted again
	}{
		{"empty", 0, nil},
		{"one", 1, nil},
		{"grows", 10_000, nil},
		{"all deleted", 5_000, func(int) bool { return true }},
		{"half deleted", 5_000, func(i int) bool { return i%2 == 0 }},
		{"the empty key", 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tab := newTable()
			model := map[string]*entry{}
			for i := range tt.keys {
				key := strconv.Itoa(i)
				if tt.name == "the empty key" {
					key = ""
				}
				e := &entry{key: key, n: i}
				got, loaded := tab.LoadOrStore(e)
				require.False(t, loaded)
				require.Same(t, e, got)
				again, loaded := tab.LoadOrStore(&entry{key: key})
				require.True(t, loaded, "stored twice: %q", key)
				require.Same(t, e, again)
				model[key] = e
			}
			check(t, tab, model)
			for i := range tt.keys {
				if tt.del != nil && tt.del(i) {
					key := strconv.Itoa(i)
					assert.False(t, tab.CompareAndDelete(&entry{key: key}), "deleted another value of %q", key)
					require.True(t, tab.CompareAndDelete(model[key]))
					require.False(t, tab.CompareAndDelete(model[key]), "deleted twice")
					delete(model, key)
				}
			}
			check(t, tab, model)
			_, ok := tab.Load("absent")
			assert.False(t, ok)
		})
	}
}

// TestTableShrinks: a table emptied of most of its keys gives its array
// back, and tombs do not pile up under keys added and deleted for ever.
func TestTableShrinks(t *testing.T) {
	t.Parallel()
	tab := newTable()
	var all []*entry
	for i := range 100_000 {
		e := &entry{key: strconv.Itoa(i)}
		tab.LoadOrStore(e)
		all = append(all, e)
	}
	big := len(tab.cur.Load().s)
	for _, e := range all[10:] {
		tab.CompareAndDelete(e)
	}
	assert.Less(t, len(tab.cur.Load().s), big/100, "array after deleting all but 10 keys")
	for i := range 1_000_000 { // churn: one key in, one out
		e := &entry{key: "churn-" + strconv.Itoa(i)}
		tab.LoadOrStore(e)
		tab.CompareAndDelete(e)
	}
	assert.LessOrEqual(t, len(tab.cur.Load().s), 256, "array after a million keys came and went")
	assert.Equal(t, 10, tab.Len())
}

// TestTableConcurrent runs readers beside writers that add and delete
// keys (under -race in make test): a reader finds every key that stays,
// with its own value, while the table grows and shrinks under it.
func TestTableConcurrent(t *testing.T) {
	t.Parallel()
	tab := newTable()
	const stay = 1_000
	for i := range stay {
		tab.LoadOrStore(&entry{key: "stay-" + strconv.Itoa(i), n: i})
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				e := &entry{key: fmt.Sprint("w", w, "-", i%5000)}
				got, _ := tab.LoadOrStore(e)
				if i%3 == 0 {
					tab.CompareAndDelete(got)
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, 2))
			for range 200_000 {
				i := rng.IntN(stay)
				e, ok := tab.Load("stay-" + strconv.Itoa(i))
				if !ok || e.n != i {
					t.Errorf("stay-%d: %v %+v", i, ok, e)
					return
				}
			}
		})
	}
	for range 50 { // every key that stays, once a Range, however the table changes
		seen := make([]int, stay)
		tab.Range(func(e *entry) bool {
			if strings.HasPrefix(e.key, "stay-") {
				seen[e.n]++
			}
			return true
		})
		for i, n := range seen {
			require.Equal(t, 1, n, "stay-%d visited", i)
		}
	}
	close(stop)
	wg.Wait()
}

// FuzzTable runs a sequence of operations, decoded from the input, on a
// table and on a Go map, and requires the same answers throughout.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 128, 129, 4, 5, 255, 7})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tab := newTable()
		model := map[string]*entry{}
		for i, op := range ops {
			key := strconv.Itoa(int(op % 64))
			switch {
			case op < 128:
				e := &entry{key: key, n: i}
				got, loaded := tab.LoadOrStore(e)
				if old, ok := model[key]; ok {
					require.True(t, loaded)
					require.Same(t, old, got)
				} else {
					require.False(t, loaded)
					model[key] = e
				}
			default:
				if old, ok := model[key]; ok {
					require.True(t, tab.CompareAndDelete(old))
					delete(model, key)
				} else {
					require.False(t, tab.CompareAndDelete(&entry{key: key}))
				}
			}
		}
		check(t, tab, model)
	})
}

// BenchmarkLoad compares a lookup in a Table, a sync.Map and a plain Go
// map over the same keys, in a random order, at sizes where the keys'
// state no longer fits the CPU's caches.
//
//	go test -run '^$' -bench Load ./internal/keytable/
func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "tenant:" + strconv.Itoa(i)
		}
		order := make([]string, 1<<20)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range order {
			order[i] = keys[rng.IntN(n)]
		}
		mask := len(order) - 1
		b.Run(fmt.Sprintf("map/%d", n), func(b *testing.B) {
			m := make(map[string]*entry, n)
			for _, k := range keys {
				m[k] = &entry{key: k}
			}
			i := 0
			for b.Loop() {
				m[order[i&mask]].n++
				i++
			}
		})
		b.Run(fmt.Sprintf("table/%d", n), func(b *testing.B) {
			tab := newTable()
			for _, k := range keys {
				tab.LoadOrStore(&entry{key: k})
			}
			i := 0
			for b.Loop() {
				e, _ := tab.Load(order[i&mask])
				e.n++
				i++
			}
		})
		b.Run(fmt.Sprintf("syncmap/%d", n), func(b *testing.B) {
			var m sync.Map
			for _, k := range keys {
				m.Store(k, &entry{key: k})
			}
			i := 0
			for b.Loop() {
				v, _ := m.Load(order[i&mask])
				v.(*entry).n++
				i++
			}
		})
	}
}
