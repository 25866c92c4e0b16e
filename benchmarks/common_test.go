package benchmarks

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
)

// limitPerSecond is every limiter's rate per key, and its burst: far
// above what any benchmark offers, so that every decision is admitted.
const limitPerSecond = 1_000_000_000

// zipfKeys is how many keys the many-key benchmarks draw from.
const zipfKeys = 100_000

// seqLen is the length of a precomputed key sequence, a power of two so
// that the loop picks its next key with a mask.
const seqLen = 1 << 20

// decider decides one request for key. It reports whether the request
// was admitted; an error means it could not be decided.
type decider func(key string) (bool, error)

// oneKey is the key sequence of the one-key benchmarks.
var oneKey = []string{"user:1"}

// zipf holds the many-key benchmarks' keys: all of them, and the
// sequence the benchmarks offer, drawn Zipf(s=1.1, v=1) over the keys with
// a fixed seed, so that every library sees the same requests.
var zipf = func() (z struct{ keys, seq []string }) {
	z.keys = make([]string, zipfKeys)
	for i := range z.keys {
		z.keys[i] = "user:" + strconv.Itoa(i)
	}
	r := rand.New(rand.NewPCG(27, 1))
	d := rand.NewZipf(r, 1.1, 1, zipfKeys-1)
	z.seq = make([]string, seqLen)
	for i := range z.seq {
		z.seq[i] = z.keys[d.Uint64()]
	}
	return z
}()

// offset hands each parallel goroutine its own starting point in a key
// sequence, so that they do not offer the same keys in lockstep.
var offset atomic.Uint64

// runSerial times allow over seq, one decision after another, on one
// goroutine. The limiter is made first, and warm is offered once, before
// the timer starts, so that the keys exist as in a running server.
func runSerial(b *testing.B, newDecider func(b *testing.B) (decider, func()), warm, seq []string) {
	allow, done := newDecider(b)
	defer done()
	warmUp(b, allow, warm)
	mask := len(seq) - 1
	b.ReportAllocs()
	admitted, failed := tally(allow, func(i int) string { return seq[i&mask] }, 0, b.Loop)
	report(b, admitted, failed)
}

// runParallel times allow over seq from b.RunParallel's goroutines
// (GOMAXPROCS of them), each starting at its own place in seq.
func runParallel(b *testing.B, newDecider func(b *testing.B) (decider, func()), warm, seq []string) {
	allow, done := newDecider(b)
	defer done()
	warmUp(b, allow, warm)
	mask := len(seq) - 1
	var admitted, failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ok, bad := tally(allow, func(i int) string { return seq[i&mask] }, int(offset.Add(1)*7919), pb.Next)
		admitted.Add(int64(ok))
		failed.Add(int64(bad))
	})
	b.StopTimer()
	report(b, int(admitted.Load()), int(failed.Load()))
}

// tally offers key(i) for i from start on while next says to go on, and
// counts the decisions admitted and those that failed. It is every timed
// loop of this module, so that each library pays the same harness: one
// call of key and one of allow a decision.
func tally(allow decider, key func(int) string, start int, next func() bool) (admitted, failed int) {
	for i := start; next(); i++ {
		ok, err := allow(key(i))
		if err != nil {
			failed++
		} else if ok {
			admitted++
		}
	}
	return admitted, failed
}

// warmUp offers each of keys once, so that they exist before timing.
// An error here fails the benchmark: nothing contends yet.
func warmUp(b *testing.B, allow decider, keys []string) {
	b.Helper()
	for _, k := range keys {
		if _, err := allow(k); err != nil {
			b.Fatalf("warming %q: %v", k, err)
		}
	}
}

// report adds the share of decisions admitted, which is 1 unless a
// library fails or refuses under a limit out of reach, and the share that
// failed with an error (throttled's GCRA gives up after ten lost
// compare-and-swaps on one key, for one).
func report(b *testing.B, admitted, failed int) {
	b.Helper()
	b.ReportMetric(float64(admitted)/float64(b.N), "admitted/op")
	b.ReportMetric(float64(failed)/float64(b.N), "failed/op")
}
