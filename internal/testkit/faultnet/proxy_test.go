package faultnet

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestProxy(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) }) // after the echo server's cleanup
	p, err := NewProxy(echo(t))
	require.NoError(t, err)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string, wait time.Duration) (string, error) {
		require.NoError(t, c.SetDeadline(time.Now().Add(wait)))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}

	got, err := roundTrip("one", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "one\n", got)

	p.Blackhole()
	_, err = roundTrip("lost", 200*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne, "no answer and no close: only the deadline ends the wait")
	assert.True(t, ne.Timeout())

	p.Restore()
	got, err = roundTrip("two", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "two\n", got, "the same connection forwards again; what was dropped stays lost")

	require.NoError(t, p.Close())
	_, err = roundTrip("three", time.Second)
	assert.Error(t, err, "closed with the proxy")
}

func TestProxyDelay(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	p, err := NewProxy(echo(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msgs ...string) time.Duration {
		start := time.Now()
		for _, m := range msgs {
			_, err := c.Write([]byte(m + "\n"))
			require.NoError(t, err)
		}
		for _, m := range msgs {
			got, err := r.ReadString('\n')
			require.NoError(t, err)
			assert.Equal(t, m+"\n", got, "in order")
		}
		return time.Since(start)
	}
	roundTrip("warm")
	p.SetDelay(30 * time.Millisecond)
	took := roundTrip("one")
	assert.GreaterOrEqual(t, took, 60*time.Millisecond, "both ways")
	// Ten messages sent at once arrive after one round trip, not ten.
	took = roundTrip("a", "b", "c", "d", "e", "f", "g", "h", "i", "j")
	assert.GreaterOrEqual(t, took, 60*time.Millisecond)
	assert.Less(t, took, 300*time.Millisecond, "a delay, not a narrower pipe")
	p.SetDelay(0)
	assert.Less(t, roundTrip("two"), 50*time.Millisecond)
}
