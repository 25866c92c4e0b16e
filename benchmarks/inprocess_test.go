package benchmarks

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	uberratelimit "go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/local"
)

// The in-process contenders. Each returns a fresh limiter's decision
// function, set to limitPerSecond per key, and what releases it.

// newLocal is hybridlimit's local.Limiter with its default algorithm,
// TokenBucket (GCRA).
func newLocal(b *testing.B) (decider, func()) {
	l, err := local.New(local.Config{Algorithm: local.TokenBucket, Limit: limitPerSecond, Window: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return func(key string) (bool, error) {
		d, err := l.Allow(key)
		return d.Allowed(), err
	}, func() {}
}

// newHybridLocal is hybridlimit's front door, hybrid.Limiter, with one
// Local policy (no fleet) matching every key.
func newHybridLocal(b *testing.B) (decider, func()) {
	l, err := hybrid.New(hybrid.Config{Policies: []hybrid.Policy{{
		Name: "bench", Mode: hybrid.Local, Limit: limitPerSecond, Window: time.Second,
	}}})
	if err != nil {
		b.Fatal(err)
	}
	return func(key string) (bool, error) {
		d, err := l.Allow(key)
		return d.Allowed(), err
	}, func() { l.Close() }
}

// newXTimeRateOne is one golang.org/x/time/rate Limiter: with one key
// there is no key to look up, which is how it is used for one limit.
func newXTimeRateOne(*testing.B) (decider, func()) {
	l := rate.NewLimiter(rate.Limit(limitPerSecond), limitPerSecond)
	return func(string) (bool, error) { return l.Allow(), nil }, func() {}
}

// newXTimeRateMap is a sync.Map of golang.org/x/time/rate Limiters, one
// per key, made on first sight: how users limit many keys with it.
func newXTimeRateMap(*testing.B) (decider, func()) {
	var m sync.Map
	return func(key string) (bool, error) {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(rate.Limit(limitPerSecond), limitPerSecond))
		}
		return v.(*rate.Limiter).Allow(), nil
	}, func() {}
}

// newSethvargo is github.com/sethvargo/go-limiter's memorystore, at
// limitPerSecond as 1,000 times that per 1,000 s. Its bucket refills at
// each tick of Interval by Interval/Tokens tokens per tick elapsed (its
// fillRate, in nanoseconds per token), which is 1 at 10^9 per second: after
// its first second it would admit one request a second. Its first interval
// here outlasts any run, as its first second does not.
func newSethvargo(b *testing.B) (decider, func()) {
	s, err := memorystore.New(&memorystore.Config{Tokens: 1000 * limitPerSecond, Interval: 1000 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func(key string) (bool, error) {
			_, _, _, ok, err := s.Take(ctx, key)
			return ok, err
		}, func() {
			if err := s.Close(ctx); err != nil {
				b.Error(err)
			}
		}
}

// newThrottled is github.com/throttled/throttled/v2's GCRA over its
// memstore, bounded (an LRU) as its README shows, at 2^20 keys: the
// default bound of hybridlimit's local.Limiter.
func newThrottled(b *testing.B) (decider, func()) {
	st, err := memstore.NewCtx(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate: throttled.PerSec(limitPerSecond), MaxBurst: limitPerSecond - 1,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	return func(key string) (bool, error) {
		limited, _, err := l.RateLimitCtx(ctx, key, 1)
		return !limited, err
	}, func() {}
}

// newUlule is github.com/ulule/limiter/v3 over its memory store, which
// counts per fixed window.
func newUlule(*testing.B) (decider, func()) {
	l := ulule.New(ululememory.NewStore(), ulule.Rate{Period: time.Second, Limit: limitPerSecond})
	ctx := context.Background()
	return func(key string) (bool, error) {
		c, err := l.Get(ctx, key)
		return !c.Reached, err
	}, func() {}
}

// newUber is one go.uber.org/ratelimit Limiter. Its Take blocks until the
// request's slot comes rather than refusing it; at limitPerSecond the
// slot is always due, so Take never sleeps here and every call counts as
// admitted. It has no keys.
func newUber(*testing.B) (decider, func()) {
	l := uberratelimit.New(limitPerSecond)
	return func(string) (bool, error) {
		l.Take()
		return true, nil
	}, func() {}
}

// oneKeyBench runs newDecider on one key, serially and in parallel.
func oneKeyBench(b *testing.B, newDecider func(*testing.B) (decider, func())) {
	b.Run("serial", func(b *testing.B) { runSerial(b, newDecider, oneKey, oneKey) })
	b.Run("parallel", func(b *testing.B) { runParallel(b, newDecider, oneKey, oneKey) })
}

// zipfBench runs newDecider over the Zipf sequence of 100,000 keys,
// serially and in parallel, every key offered once before timing.
func zipfBench(b *testing.B, newDecider func(*testing.B) (decider, func())) {
	b.Run("serial", func(b *testing.B) { runSerial(b, newDecider, zipf.keys, zipf.seq) })
	b.Run("parallel", func(b *testing.B) { runParallel(b, newDecider, zipf.keys, zipf.seq) })
}

// BenchmarkOneKey_Local measures one admitted decision of hybridlimit's
// local.Limiter (GCRA) on one key: serially, and from GOMAXPROCS
// goroutines contending for the key.
func BenchmarkOneKey_Local(b *testing.B) { oneKeyBench(b, newLocal) }

// BenchmarkOneKey_HybridLocal measures one admitted decision of
// hybrid.Limiter with a Local policy (no fleet) on one key, serially and
// in parallel: local.Limiter plus the policy lookup of the front door.
func BenchmarkOneKey_HybridLocal(b *testing.B) { oneKeyBench(b, newHybridLocal) }

// BenchmarkOneKey_XTimeRate measures one rate.Limiter.Allow of
// golang.org/x/time/rate, the baseline of the ratios: one limiter, no key
// lookup, serially and in parallel.
func BenchmarkOneKey_XTimeRate(b *testing.B) { oneKeyBench(b, newXTimeRateOne) }

// BenchmarkOneKey_Sethvargo measures one Take of sethvargo/go-limiter's
// memorystore on one key, serially and in parallel.
func BenchmarkOneKey_Sethvargo(b *testing.B) { oneKeyBench(b, newSethvargo) }

// BenchmarkOneKey_Throttled measures one RateLimitCtx of throttled's GCRA
// over its memstore on one key, serially and in parallel.
func BenchmarkOneKey_Throttled(b *testing.B) { oneKeyBench(b, newThrottled) }

// BenchmarkOneKey_Ulule measures one Get of ulule/limiter over its memory
// store on one key, serially and in parallel.
func BenchmarkOneKey_Ulule(b *testing.B) { oneKeyBench(b, newUlule) }

// BenchmarkOneKey_Uber measures one Take of go.uber.org/ratelimit, which
// paces (blocks) instead of refusing and has no keys; at this rate it
// never sleeps, so this is the cost of its bookkeeping alone.
func BenchmarkOneKey_Uber(b *testing.B) { oneKeyBench(b, newUber) }

// BenchmarkZipf_Local measures one admitted decision of local.Limiter
// (GCRA) for a key drawn Zipf(1.1) from 100,000, serially and in
// parallel.
func BenchmarkZipf_Local(b *testing.B) { zipfBench(b, newLocal) }

// BenchmarkZipf_HybridLocal measures one admitted decision of
// hybrid.Limiter with a Local policy for a key drawn Zipf(1.1) from
// 100,000, serially and in parallel.
func BenchmarkZipf_HybridLocal(b *testing.B) { zipfBench(b, newHybridLocal) }

// BenchmarkZipf_XTimeRate measures one decision of a sync.Map of
// golang.org/x/time/rate Limiters, the ratios' baseline, for a key drawn
// Zipf(1.1) from 100,000, serially and in parallel.
func BenchmarkZipf_XTimeRate(b *testing.B) { zipfBench(b, newXTimeRateMap) }

// BenchmarkZipf_Sethvargo measures one Take of sethvargo/go-limiter's
// memorystore for a key drawn Zipf(1.1) from 100,000, serially and in
// parallel.
func BenchmarkZipf_Sethvargo(b *testing.B) { zipfBench(b, newSethvargo) }

// BenchmarkZipf_Throttled measures one RateLimitCtx of throttled's GCRA
// over its memstore for a key drawn Zipf(1.1) from 100,000, serially and
// in parallel.
func BenchmarkZipf_Throttled(b *testing.B) { zipfBench(b, newThrottled) }

// BenchmarkZipf_Ulule measures one Get of ulule/limiter's memory store
// for a key drawn Zipf(1.1) from 100,000, serially and in parallel.
func BenchmarkZipf_Ulule(b *testing.B) { zipfBench(b, newUlule) }
