package hybrid_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/clock"
)

// TestLocalBypassTooManyKeys: a Local key held by its policy's
// local.Limiter alone (no Config.Resolve) that finds it full fails with
// an error that is ErrTooManyKeys by every path, not only Allow:
// httplimit, which uses TakeN, answers 503 for ErrTooManyKeys and 500
// for anything else.
func TestLocalBypassTooManyKeys(t *testing.T) {
	t.Parallel()
	clk := clock.NewManual(epoch)
	l, err := hybrid.New(hybrid.Config{
		Policies: []hybrid.Policy{{Name: "p", Mode: hybrid.Local, Limit: 10, Window: time.Second}},
		MaxKeys:  2, ManualSync: true, Clock: clk,
	})
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Allow("a")
	require.NoError(t, err)
	_, err = l.Allow("b")
	require.NoError(t, err)

	_, err = l.Allow("c")
	assert.ErrorIs(t, err, hybrid.ErrTooManyKeys, "Allow")
	r, err := l.TakeN("c", 1)
	assert.ErrorIs(t, err, hybrid.ErrTooManyKeys, "TakeN")
	assert.False(t, r.Decision().Allowed())
	assert.ErrorIs(t, l.WaitN(context.Background(), "c", 1), hybrid.ErrTooManyKeys, "WaitN")
}
