package sketch

import (
	"math/rand/v2"
	"sync"
	"time"
)

// A Detector finds the keys offered faster than a threshold, from any
// number of goroutines. Observe samples one request in Sample into a
// SpaceSaving sketch under a mutex, so that the request path pays a
// random draw and, rarely, a short critical section; the caller collects
// the hot keys once per interval with Hot. It is safe for concurrent use.
type Detector struct {
	sample    uint32
	below     uint32 // a draw below it is sampled: 2^32/sample
	threshold float64

	mu sync.Mutex
	ss *SpaceSaving
}

// minHits is how many sampled requests a key needs in an interval before
// its rate is believed.
const minHits = 4

// HotKey is a key offered at Rate requests per second or more, as
// estimated over the last interval.
type HotKey struct {
	Key  string
	Rate float64
}

// NewDetector returns a Detector of k counters that samples one request
// in sample (at least 1) and reports keys whose estimated rate reaches
// threshold requests per second. A key must stand out of the sampling
// noise: with sample s over an interval of t seconds, a rate r is
// estimated from about r*t/s draws.
func NewDetector(k int, sample uint32, threshold float64) *Detector {
	sample = max(sample, 1)
	return &Detector{sample: sample, below: uint32((1 << 32) / uint64(sample)), threshold: threshold, ss: NewSpaceSaving(k)}
}

// Observe counts one request for key, one time in Sample.
func (d *Detector) Observe(key string) {
	if d.sample > 1 && rand.Uint32() >= d.below {
		return
	}
	d.mu.Lock()
	d.ss.Add(key, uint64(d.sample))
	d.mu.Unlock()
}

// Hot returns the keys estimated at the threshold or above over the
// interval that has just ended, heaviest first, and starts the next. A
// key's estimate is its lower bound (count less error), so a key is not
// called hot on the strength of what it inherited from evicted ones, and
// it needs at least minHits sampled requests.
func (d *Detector) Hot(interval time.Duration) []HotKey {
	d.mu.Lock()
	top := d.ss.Top(d.ss.k)
	d.ss.Reset()
	d.mu.Unlock()
	secs := interval.Seconds()
	if secs <= 0 {
		return nil
	}
	var out []HotKey
	for _, it := range top {
		if it.Count-it.Err < minHits*uint64(d.sample) {
			continue // a sampled hit or two is noise, not a rate
		}
		if r := float64(it.Count-it.Err) / secs; r >= d.threshold {
			out = append(out, HotKey{it.Key, r})
		}
	}
	return out
}
