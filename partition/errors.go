package partition

import (
	"errors"
	"fmt"

	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
)

// ErrInvalidConfig is wrapped by every error NewLadder returns for a
// config it refuses, and by hybrid.New's for a BreakerConfig it refuses;
// the message names the field.
var ErrInvalidConfig = errors.New("partition: invalid config")

// invalidf is a config error naming its field, wrapping ErrInvalidConfig.
func invalidf(format string, a ...any) error {
	return cfgerr.Wrap(ErrInvalidConfig, fmt.Errorf(format, a...))
}
