package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLocalDemo runs the demo briefly and checks that its summary adds up:
// each algorithm admits no more than its limit allows over the run.
func TestLocalDemo(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	d := localDemo{duration: 600 * time.Millisecond, limit: 10, window: time.Second, burst: 30, every: 200 * time.Millisecond, tick: 200 * time.Millisecond}
	sum, err := d.run(context.Background(), &out)
	require.NoError(t, err)
	// The client offers 150/s against 10/s: every limiter admits its first
	// window in full and never more than the limit allows over the run.
	require.Len(t, sum.admitted, len(demoAlgorithms))
	ceiling := int(float64(d.limit)*(sum.elapsed.Seconds()/d.window.Seconds()+2)) + 1
	for i, alg := range demoAlgorithms {
		assert.GreaterOrEqual(t, sum.admitted[i], int(d.limit), alg.String())
		assert.LessOrEqual(t, sum.admitted[i], ceiling, alg.String())
	}
	assert.Greater(t, sum.offered, 3*int(d.limit))
	text := out.String()
	for _, alg := range demoAlgorithms {
		assert.Contains(t, text, alg.String())
	}
	assert.Contains(t, text, "admitted")
	assert.Contains(t, text, "offered")
}
