package cfgerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
)

func TestWrap(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("pkg: invalid config")
	inner := errors.New("inner")
	err := cfgerr.Wrap(sentinel, fmt.Errorf("pkg: Config.X is -1; it must be positive: %w", inner))
	assert.ErrorIs(t, err, sentinel)
	assert.ErrorIs(t, err, inner)
	assert.Equal(t, "pkg: Config.X is -1; it must be positive: inner", err.Error())
	assert.NoError(t, cfgerr.Wrap(sentinel, nil))
}
