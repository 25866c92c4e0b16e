package local_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

// sink keeps results alive so the compiler cannot drop the calls.
var sink atomic.Bool

// A high limit keeps every benchmark on the admit path, the one that
// writes state, rather than the cheaper refusal path.
const benchLimit = 1_000_000_000

func newBench(b *testing.B, alg local.Algorithm, maxKeys int) *local.Limiter {
	b.Helper()
	limit := int64(benchLimit)
	if alg == local.SlidingLog {
		limit = local.MaxLogLimit
	}
	l, err := local.New(local.Config{Algorithm: alg, Limit: limit, Window: time.Second, MaxKeys: maxKeys})
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkClock is one read of the real clock as a decision reads it
// (Nanotime): the floor under every decision, which must read the time.
func BenchmarkClock(b *testing.B) {
	c := clock.Real
	var t int64
	for b.Loop() {
		t += c.Nanotime()
	}
	sink.Store(t == 0)
}

// BenchmarkClockNow is a full time.Now through the clock, which reads the
// wall clock as well; golang.org/x/time/rate pays it on every call.
func BenchmarkClockNow(b *testing.B) {
	c := clock.Real
	var t time.Time
	for b.Loop() {
		t = c.Now()
	}
	sink.Store(t.IsZero())
}

func BenchmarkAllow(b *testing.B) {
	for _, alg := range []local.Algorithm{local.TokenBucket, local.SlidingWindow, local.FixedWindow, local.SlidingLog} {
		b.Run(alg.String(), func(b *testing.B) {
			l := newBench(b, alg, 0)
			var ok bool
			b.ReportAllocs()
			for b.Loop() {
				r, _ := l.Allow("user:42")
				ok = r.Allowed()
			}
			sink.Store(ok)
		})
	}
	b.Run("xtimerate", func(b *testing.B) {
		l := rate.NewLimiter(benchLimit, benchLimit)
		var ok bool
		b.ReportAllocs()
		for b.Loop() {
			ok = l.Allow()
		}
		sink.Store(ok)
	})
}

func BenchmarkAllowParallel(b *testing.B) {
	b.Run("gcra", func(b *testing.B) {
		l := newBench(b, local.TokenBucket, 0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var ok bool
			for pb.Next() {
				r, _ := l.Allow("user:42")
				ok = r.Allowed()
			}
			sink.Store(ok)
		})
	})
	b.Run("xtimerate", func(b *testing.B) {
		l := rate.NewLimiter(benchLimit, benchLimit)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var ok bool
			for pb.Next() {
				ok = l.Allow()
			}
			sink.Store(ok)
		})
	})
}

const manyKeys = 1_000_000

// zipfKeys returns a stream of key names drawn Zipf(1.1) from manyKeys
// distinct keys, built once so the benchmark does not time strconv.
var zipfKeys = sync.OnceValue(func() []string {
	names := make([]string, manyKeys)
	for i := range names {
		names[i] = "user:" + strconv.Itoa(i)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, manyKeys-1)
	stream := make([]string, 1<<20)
	for i := range stream {
		stream[i] = names[z.Uint64()]
	}
	return stream
})

func BenchmarkAllowManyKeys(b *testing.B) {
	stream := zipfKeys()
	mask := len(stream) - 1
	b.Run("gcra", func(b *testing.B) {
		l := newBench(b, local.TokenBucket, 2*manyKeys)
		for _, k := range stream {
			_, _ = l.Allow(k)
		}
		var ok bool
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			r, _ := l.Allow(stream[i&mask])
			ok = r.Allowed()
			i++
		}
		sink.Store(ok)
	})
	b.Run("xtimerate", func(b *testing.B) {
		// What a user writes today: a sync.Map of *rate.Limiter.
		var m sync.Map
		allow := func(key string) bool {
			v, ok := m.Load(key)
			if !ok {
				v, _ = m.LoadOrStore(key, rate.NewLimiter(benchLimit, benchLimit))
			}
			return v.(*rate.Limiter).Allow()
		}
		for _, k := range stream {
			allow(k)
		}
		var ok bool
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			ok = allow(stream[i&mask])
			i++
		}
		sink.Store(ok)
	})
}

// BenchmarkMemoryPerKey reports the heap held per idle key, keys included,
// with 1M keys.
func BenchmarkMemoryPerKey(b *testing.B) {
	var perKey float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newBench(b, local.TokenBucket, 2*manyKeys)
		for i := range manyKeys {
			// Built here, so the heap held by the keys is counted too.
			_, _ = l.Allow("user:" + strconv.Itoa(i))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if l.Len() != manyKeys {
			b.Fatalf("Len = %d, want %d", l.Len(), manyKeys)
		}
		perKey = float64(after.HeapAlloc-before.HeapAlloc) / manyKeys
		runtime.KeepAlive(l)
	}
	b.ReportMetric(perKey, "bytes/key")
}

// BenchmarkAllowFullRefused is a flood of new keys against a Limiter
// holding MaxKeys keys that have all spent something: each new key is
// refused with ErrTooManyKeys, and must cost little, since nothing can be
// forgotten to make room for it.
func BenchmarkAllowFullRefused(b *testing.B) {
	const maxKeys = 1 << 16
	l, err := local.New(local.Config{Limit: 1, Window: time.Hour, MaxKeys: maxKeys})
	if err != nil {
		b.Fatal(err)
	}
	for i := range maxKeys {
		_, _ = l.Allow("held:" + strconv.Itoa(i))
	}
	names := make([]string, 1<<16)
	for i := range names {
		names[i] = "new:" + strconv.Itoa(i)
	}
	var ok bool
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		r, _ := l.Allow(names[i&(len(names)-1)])
		ok = r.Allowed()
		i++
	}
	sink.Store(ok)
}

// BenchmarkReserveCancel is a reservation given back at once, as a caller
// that takes tokens from several limits and finds a later one refusing
// does.
func BenchmarkReserveCancel(b *testing.B) {
	l := newBench(b, local.TokenBucket, 0)
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		r, _ := l.ReserveNAt("user:42", now, 1, 0)
		r.Cancel()
	}
}
