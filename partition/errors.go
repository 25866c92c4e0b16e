package partition

import (
	"errors"
	"fmt"

	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
)

// ErrInvalidConfig is wrapped by every error NewBreaker and NewLadder
// return for a config they refuse; the message names the field.
var ErrInvalidConfig = errors.New("partition: invalid config")

// invalidf is a config error naming its field, wrapping ErrInvalidConfig.
func invalidf(format string, a ...any) error {
	return cfgerr.Wrap(ErrInvalidConfig, fmt.Errorf(format, a...))
}
