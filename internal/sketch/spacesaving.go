// Package sketch finds the heaviest keys of a stream in bounded memory:
// the Space-Saving algorithm (Metwally, Agrawal and El Abbadi, 2005), and
// a Detector that samples a limiter's requests into it from any number of
// goroutines at a cost of a few nanoseconds per request.
package sketch

import (
	"container/heap"
	"slices"
	"strings"
)

// SpaceSaving counts the k heaviest keys of a stream in memory for k
// keys, however many distinct keys the stream holds. A key's count is
// never under its true count, and over it by at most Err, which is at
// most the stream's total divided by k: any key whose true count exceeds
// total/k is among the k held. It is not safe for concurrent use.
type SpaceSaving struct {
	k     int
	byKey map[string]*counter
	h     minHeap
	total uint64
}

type counter struct {
	key   string
	count uint64
	err   uint64
	i     int // index in the heap
}

// NewSpaceSaving returns a sketch of k counters; k is at least 1.
func NewSpaceSaving(k int) *SpaceSaving {
	k = max(k, 1)
	return &SpaceSaving{k: k, byKey: make(map[string]*counter, k)}
}

// Add counts n occurrences of key.
func (s *SpaceSaving) Add(key string, n uint64) {
	s.total += n
	if c := s.byKey[key]; c != nil {
		c.count += n
		heap.Fix(&s.h, c.i)
		return
	}
	if len(s.h) < s.k {
		c := &counter{key: strings.Clone(key), count: n}
		s.byKey[c.key] = c
		heap.Push(&s.h, c)
		return
	}
	// Evict the smallest: the newcomer inherits its count as its error.
	c := s.h[0]
	delete(s.byKey, c.key)
	c.key, c.err, c.count = strings.Clone(key), c.count, c.count+n
	s.byKey[c.key] = c
	heap.Fix(&s.h, 0)
}

// Item is one key's estimated count: its true count lies in
// [Count-Err, Count].
type Item struct {
	Key   string
	Count uint64
	Err   uint64
}

// Top returns up to n keys with the highest counts, highest first (ties
// by key).
func (s *SpaceSaving) Top(n int) []Item {
	out := make([]Item, 0, len(s.h))
	for _, c := range s.h {
		out = append(out, Item{c.key, c.count, c.err})
	}
	slices.SortFunc(out, func(a, b Item) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(n, len(out))]
}

// Total is how many occurrences were added since the last Reset.
func (s *SpaceSaving) Total() uint64 { return s.total }

// Len is how many keys the sketch holds: at most k.
func (s *SpaceSaving) Len() int { return len(s.h) }

// Reset forgets every count.
func (s *SpaceSaving) Reset() {
	clear(s.byKey)
	clear(s.h)
	s.h = s.h[:0]
	s.total = 0
}

type minHeap []*counter

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *minHeap) Push(x any) {
	c := x.(*counter)
	c.i = len(*h)
	*h = append(*h, c)
}
func (h *minHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}
