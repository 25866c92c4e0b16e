package fleettest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/fleettest"
	"github.com/hybridlimit/hybridlimit/local"
)

// TestUnderLimit checks the under-limit refusals of hand-made runs
// against a single limiter's bucket of 4: a refusal counts only while
// the ideal had at least 2 left, and it is matched to its own arrival,
// not to its timestamp, which other arrivals may share.
func TestUnderLimit(t *testing.T) {
	t.Parallel()
	bucket := hybrid.Policy{Name: "api", Limit: 4, Window: time.Second}
	sliding := hybrid.Policy{Name: "api", Algorithm: local.SlidingWindow, Limit: 4, Window: time.Second}
	ms := int64(time.Millisecond)
	type a = fleettest.Arrival
	tests := []struct {
		name     string
		policy   hybrid.Policy
		arrivals []a
		want     float64 // percent of the arrivals
	}{
		{"a full bucket refused", bucket, []a{{0, true}, {ms, false}}, 50},
		{"the ideal dry too", bucket, []a{{0, true}, {0, true}, {0, true}, {0, true}, {ms, false}, {ms, false}}, 0},
		{"half left is under the limit", bucket, []a{{0, true}, {0, true}, {ms, false}}, 100.0 / 3},
		{"less than half left is not", bucket, []a{{0, true}, {0, true}, {0, true}, {ms, false}}, 0},
		// Recorded refusal first: replayed after the admissions beside
		// it, it finds 1 left, not 4.
		{"ties replay admissions first", bucket, []a{{0, false}, {0, true}, {0, true}, {0, true}}, 0},
		{"a refilled bucket", bucket, []a{{0, true}, {0, true}, {0, true}, {0, true}, {600 * ms, false}}, 20},
		{"sliding window", sliding, []a{{0, true}, {ms, false}, {2 * ms, false}}, 200.0 / 3},
		{"nothing refused", bucket, []a{{0, true}, {ms, true}}, 0},
		{"nothing offered", bucket, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &fleettest.Run{Start: time.Unix(1_700_000_000, 0), Arrivals: tt.arrivals}
			for _, x := range tt.arrivals {
				r.Offered = append(r.Offered, x.At)
				if x.Admitted {
					r.Admitted = append(r.Admitted, x.At)
				}
			}
			assert.InDelta(t, tt.want, r.UnderLimit(t, tt.policy), 1e-9)
		})
	}
}
