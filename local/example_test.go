package local_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hybridlimit/hybridlimit/internal/clock"
	"github.com/hybridlimit/hybridlimit/local"
)

func ExampleLimiter_Allow() {
	// 100 requests a minute per client, in bursts of up to 120.
	limiter, err := local.New(local.Config{Limit: 100, Window: time.Minute, Burst: 120})
	if err != nil {
		panic(err)
	}
	r, err := limiter.Allow("client-42")
	if err != nil {
		panic(err) // only a key longer than Config.MaxKeyLen
	}
	if !r.Allowed() {
		fmt.Printf("429: retry in %v\n", r.RetryAfter())
		return
	}
	fmt.Printf("ok, %d of %d left\n", r.Remaining(), r.Limit())
	// Output: ok, 119 of 120 left
}

func ExampleLimiter_AllowNAt() {
	// The explicit-time variants decide at a given instant, for replaying
	// a log or for tests.
	limiter, _ := local.New(local.Config{Algorithm: local.SlidingWindow, Limit: 3, Window: time.Second})
	t0 := time.Now()
	for i := range 4 {
		r, _ := limiter.AllowNAt("k", t0.Add(time.Duration(i)*time.Millisecond), 1)
		fmt.Println(i, r.Allowed(), r.Remaining())
	}
	// Output:
	// 0 true 2
	// 1 true 1
	// 2 true 0
	// 3 false 0
}

func ExampleLimiter_SetLimit() {
	// A node's share of a fleet quota changes; what the key spent stays spent.
	limiter, _ := local.New(local.Config{Limit: 10, Window: time.Second})
	r, _ := limiter.AllowN("tenant", 4)
	fmt.Println(r.Remaining())
	_ = limiter.SetLimit("tenant", 5, 5)
	r, _ = limiter.AllowN("tenant", 0) // n == 0 only reports
	fmt.Println(r.Remaining(), r.Limit())
	// Output:
	// 6
	// 1 5
}

func ExampleLimiter_Wait() {
	// Wait shapes instead of refusing: requests leave at the configured
	// rate. A manual clock stands in for time here.
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, _ := local.New(local.Config{Limit: 10, Window: time.Second, Burst: 1, Clock: c})
	for range 3 {
		r, _ := limiter.Reserve("queue")
		fmt.Println(r.Delay())
	}
	if err := limiter.Wait(context.Background(), "other"); err == nil {
		fmt.Println("waited")
	}
	// Output:
	// 0s
	// 100ms
	// 200ms
	// waited
}

func ExampleLimiter_SetLimitAt() {
	// Read the clock once, resize a key to this node's share, and decide
	// at that same instant: the new bucket is full at that time.
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, _ := local.New(local.Config{Limit: 100, Window: time.Second, Clock: c})
	now := c.Now()
	if err := limiter.SetLimitAt("tenant", now, 25, 25); err != nil {
		panic(err)
	}
	r, _ := limiter.AllowNAt("tenant", now, 25)
	fmt.Println(r.Allowed(), r.Remaining(), r.Limit())
	// Output: true 0 25
}

func ExampleErrTooManyKeys() {
	// A Limiter never forgets a key that has spent something. When it
	// holds MaxKeys such keys, a new key is refused with ErrTooManyKeys,
	// and the Decision refuses too, with the time until a held key has
	// refilled and so makes room.
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, _ := local.New(local.Config{Limit: 5, Window: 24 * time.Hour, MaxKeys: 1, Clock: c})
	_, _ = limiter.Allow("tenant-a")
	r, err := limiter.Allow("tenant-b")
	if err != nil || !r.Allowed() {
		fmt.Println(errors.Is(err, local.ErrTooManyKeys), r.Allowed(), r.RetryAfter())
	}
	// Output: true false 4h48m0s
}
