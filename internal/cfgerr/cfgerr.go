// Package cfgerr marks the errors a constructor returns for a Config it
// refuses, so that callers can tell them apart with errors.Is while the
// message stays the one that names the field.
package cfgerr

// Wrap returns err, which names the field at fault, as an error that is
// also sentinel (errors.Is(Wrap(s, err), s) holds) and reads as err. It
// returns nil for a nil err.
func Wrap(sentinel, err error) error {
	if err == nil {
		return nil
	}
	return &configError{sentinel: sentinel, err: err}
}

type configError struct {
	sentinel, err error
}

func (e *configError) Error() string   { return e.err.Error() }
func (e *configError) Unwrap() []error { return []error{e.sentinel, e.err} }
