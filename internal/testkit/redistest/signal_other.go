//go:build !unix

package redistest

import "errors"

// Pause stops process pid: not where there are no Unix signals.
func Pause(int) error { return errors.ErrUnsupported }

// Resume lets a paused process go on: not where there are no Unix
// signals.
func Resume(int) error { return errors.ErrUnsupported }

// exists reports whether process pid is still there: not known where
// there are no Unix signals.
func exists(int) (bool, error) { return false, errors.ErrUnsupported }
