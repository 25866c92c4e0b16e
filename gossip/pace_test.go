package gossip

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPace checks a sliding window's paced part as the gossip Syncer
// sizes it: what the window frees until two intervals on, within both the
// fleet's free budget and the node's meter there, released by the time
// both have grown to the whole grant; none when nothing more frees, when
// the demand is met now, or at the window's end.
func TestPace(t *testing.T) {
	t.Parallel()
	const window, interval = time.Second, 125 * time.Millisecond
	// Both bounds grow by 400 a window (the previous window counted 400):
	// 100 by two intervals on.
	grow := func(free, meter float64) func(float64) (float64, float64) {
		return func(f float64) (float64, float64) { return free + 400*(f-0.5), meter + 400*(f-0.5) }
	}
	tests := []struct {
		name        string
		lease       int64
		demand      int64
		frac        float64
		free, meter float64
		paced       int64
		pacedFor    time.Duration
		at          func(float64) (float64, float64)
	}{
		{"all it frees", 0, 1000, 0.5, 0, 0, 100, 250 * time.Millisecond, grow(0, 0)},
		{"the demand, sooner", 0, 50, 0.5, 0, 0, 50, 125 * time.Millisecond, grow(0, 0)},
		{"the meter binds", 0, 1000, 0.5, 10, 0, 100, 250 * time.Millisecond, grow(10, 0)},
		{"a lease now, the rest paced", 10, 1000, 0.5, 10, 10, 100, 250 * time.Millisecond, grow(10, 10)},
		{"met now", 50, 50, 0.5, 60, 60, 0, 0, grow(60, 60)},
		{"nothing frees", 0, 1000, 0.5, 0, 0, 0, 0, func(float64) (float64, float64) { return 0, 0 }},
		{"at the edge", 0, 1000, 1, 0, 0, 0, 0, grow(0, 0)},
	}
	for _, tt := range tests {
		paced, pacedFor := pace(tt.lease, tt.demand, tt.frac, interval, window, tt.free, tt.meter, tt.at)
		assert.Equal(t, tt.paced, paced, tt.name)
		assert.InDelta(t, tt.pacedFor, pacedFor, float64(time.Microsecond), tt.name)
		if paced > 0 {
			// Released evenly from the lease, it stays within both bounds.
			for f := tt.frac; f <= tt.frac+float64(pacedFor)/float64(window); f += 0.001 {
				free, meter := tt.at(f)
				spent := float64(tt.lease) + float64(paced)*(f-tt.frac)*float64(window)/float64(pacedFor)
				assert.LessOrEqual(t, spent, min(free, meter)+1e-6, "%s at %.3f", tt.name, f)
			}
		}
	}
}
