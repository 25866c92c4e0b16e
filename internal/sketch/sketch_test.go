package sketch

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExactWhenRoomForAll(t *testing.T) {
	t.Parallel()
	s := NewSpaceSaving(4)
	for _, k := range []string{"a", "b", "a", "c", "a", "b"} {
		s.Add(k, 1)
	}
	assert.Equal(t, []Item{{"a", 3, 0}, {"b", 2, 0}, {"c", 1, 0}}, s.Top(10))
	assert.Equal(t, uint64(6), s.Total())
	s.Reset()
	assert.Zero(t, s.Len())
	assert.Empty(t, s.Top(3))
}

// zipfStream draws n keys out of keys with Zipf popularity, and returns
// them with their true counts.
func zipfStream(seed uint64, n, keys int) ([]string, map[string]uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(rng, 1.2, 1, uint64(keys-1))
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("key-%d", i)
	}
	out := make([]string, n)
	truth := map[string]uint64{}
	for i := range out {
		out[i] = names[z.Uint64()]
		truth[out[i]]++
	}
	return out, truth
}

func TestZipfTopKeys(t *testing.T) {
	t.Parallel()
	stream, truth := zipfStream(1, 500_000, 100_000)
	s := NewSpaceSaving(64)
	for _, k := range stream {
		s.Add(k, 1)
	}
	type kv struct {
		k string
		n uint64
	}
	var all []kv
	for k, n := range truth {
		all = append(all, kv{k, n})
	}
	slices.SortFunc(all, func(a, b kv) int { return int(b.n) - int(a.n) })
	got := map[string]bool{}
	for _, it := range s.Top(10) {
		got[it.Key] = true
	}
	for _, want := range all[:10] {
		assert.True(t, got[want.k], "true top-10 key %s (%d) found", want.k, want.n)
	}
	bound := uint64(len(stream) / 64)
	for _, it := range s.Top(64) {
		tr := truth[it.Key]
		assert.GreaterOrEqual(t, it.Count, tr, "never under")
		assert.LessOrEqual(t, it.Count-it.Err, tr, "over by at most Err")
		assert.LessOrEqual(t, it.Err, bound, "Err at most total/k")
	}
	assert.Equal(t, 64, s.Len())
}

// TestFloodOfUniqueKeys checks that memory stays bounded and a heavy key
// is still found when almost every key is new.
func TestFloodOfUniqueKeys(t *testing.T) {
	t.Parallel()
	s := NewSpaceSaving(32)
	heavy := uint64(0)
	for i := range 1_000_000 {
		if i%10 == 0 {
			s.Add("tenant-big", 1)
			heavy++
			continue
		}
		s.Add(fmt.Sprintf("unique-%d", i), 1)
	}
	assert.Equal(t, 32, s.Len(), "memory for k keys, whatever the stream")
	top := s.Top(1)[0]
	assert.Equal(t, "tenant-big", top.Key)
	assert.GreaterOrEqual(t, top.Count, heavy)
	assert.LessOrEqual(t, top.Count-top.Err, heavy)
}

// FuzzSpaceSaving checks the sketch's invariants under any stream: the
// counters sum to the stream's length, no more than k are held, and no
// count is below its error.
func FuzzSpaceSaving(f *testing.F) {
	f.Add([]byte{1, 2, 3, 1, 1, 9, 200, 3}, uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, k uint8) {
		s := NewSpaceSaving(int(k%16) + 1)
		truth := map[string]uint64{}
		for i := 0; i+1 < len(stream); i += 2 {
			key, n := string(stream[i:i+1]), uint64(stream[i+1]%5+1)
			s.Add(key, n)
			truth[key] += n
		}
		sum := uint64(0)
		for _, it := range s.Top(1 << 10) {
			sum += it.Count
			require.GreaterOrEqual(t, it.Count, it.Err)
			require.GreaterOrEqual(t, it.Count, truth[it.Key])
			require.LessOrEqual(t, it.Count-it.Err, truth[it.Key])
		}
		require.Equal(t, s.Total(), sum)
		require.LessOrEqual(t, s.Len(), int(k%16)+1)
	})
}

// TestDetector feeds a Detector from several goroutines, one hot key at
// 2,000/s among cold ones at 20/s each, and checks that only the hot key
// is reported over a 1 s threshold of 500/s.
func TestDetector(t *testing.T) {
	t.Parallel()
	d := NewDetector(32, 8, 500)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				d.Observe("hot")
				if i%20 == 0 {
					for c := range 10 {
						d.Observe(fmt.Sprintf("cold-%d-%d", g, c))
					}
				}
			}
		})
	}
	wg.Wait()
	hot := d.Hot(time.Second)
	require.Len(t, hot, 1)
	assert.Equal(t, "hot", hot[0].Key)
	assert.InDelta(t, 2000, hot[0].Rate, 2000*0.3, "sampled estimate")
	assert.Empty(t, d.Hot(time.Second), "each interval starts afresh")
}

// TestDetectorGuards checks, without sampling, the two ways a key could
// be called hot on too little: a count it inherited by evicting another
// key, and a handful of hits.
func TestDetectorGuards(t *testing.T) {
	t.Parallel()
	d := NewDetector(1, 1, 50) // one counter: every new key evicts the last
	for range 100 {
		d.Observe("a")
	}
	d.Observe("b") // holds 101, of which 100 inherited from a
	assert.Empty(t, d.Hot(time.Second), "b's 101 are a's 100 and its own 1")

	d = NewDetector(8, 1, 1)
	for range minHits - 1 {
		d.Observe("rare")
	}
	assert.Empty(t, d.Hot(time.Second), "3 hits at a threshold of 1/s: noise")
	for range minHits {
		d.Observe("rare")
	}
	hot := d.Hot(time.Second)
	require.Len(t, hot, 1, "4 hits are believed")
	assert.Equal(t, float64(minHits), hot[0].Rate)
}

// BenchmarkDetect is what Observe adds to a request, from all Ps at once,
// sampling one request in 1 (every request takes the lock), 16 and 64.
func BenchmarkDetect(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d", i)
	}
	for _, sample := range []uint32{1, 16, 64} {
		b.Run(fmt.Sprintf("sample=%d", sample), func(b *testing.B) {
			d := NewDetector(64, sample, 1)
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(keys))
				for pb.Next() {
					d.Observe(keys[i&1023])
					i++
				}
			})
		})
	}
}
