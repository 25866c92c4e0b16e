package hybrid

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCauseOf: a fleet call's error is counted under its cause.
func TestCauseOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("sync: %w", context.DeadlineExceeded), "timeout"},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, "timeout"},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, "connect"},
		{fmt.Errorf("redis: %w", &net.OpError{Op: "dial", Err: syscall.EHOSTUNREACH}), "connect"},
		{io.EOF, "other"},
		{errors.New("MOVED 3999 127.0.0.1:6381"), "other"},
	} {
		assert.Equal(t, tt.want, errorCauses[causeOf(tt.err)], "%v", tt.err)
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
