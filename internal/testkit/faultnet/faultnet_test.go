package faultnet

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCut(t *testing.T) {
	t.Parallel()
	n := New()
	assert.False(t, n.Cut("a:1", "b:1"), "no partition")
	n.Partition([]string{"a:1", "b:1"}, []string{"c:1"})
	tests := []struct {
		from, to string
		cut      bool
	}{
		{"a:1", "b:1", false},
		{"a:1", "c:1", true},
		{"c:1", "b:1", true},
		{"d:1", "e:1", false}, // unlisted: one more group
		{"d:1", "a:1", true},
		{"d:1", "c:1", true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.cut, n.Cut(tt.from, tt.to), "%s -> %s", tt.from, tt.to)
	}
	n.Heal()
	assert.False(t, n.Cut("a:1", "c:1"), "healed")
}

// TestCutStopsOpenStreams: a stream dialed before a cut fails once the
// cut comes between its ends, both ways, and a read blocked when it came
// does not deliver what the peer then sent across it.
func TestCutStopsOpenStreams(t *testing.T) {
	t.Parallel()
	n := New()
	near, far := net.Pipe()
	defer far.Close()
	c := &conn{Conn: near, sent: new(atomic.Int64), nw: n, self: "a:1", peer: "b:1"}
	defer c.Close()
	go func() { _, _ = far.Write([]byte("x")) }()
	b := make([]byte, 1)
	_, err := c.Read(b)
	require.NoError(t, err, "no cut")

	got := make(chan error, 1)
	go func() { _, err := c.Read(b); got <- err }()
	time.Sleep(10 * time.Millisecond) // the read blocks
	n.Partition([]string{"a:1"})
	_, _ = far.Write([]byte("y")) // sent across the cut
	assert.ErrorIs(t, <-got, ErrCut, "a read blocked when the cut came")
	_, err = c.Write([]byte("z"))
	assert.ErrorIs(t, err, ErrCut, "a write across the cut")
	assert.Zero(t, c.sent.Load(), "nothing counted as sent")
}
