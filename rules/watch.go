package rules

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"time"
)

// Watch reloads the rules from path every interval (a second if
// interval is 0 or less) while ctx lasts, and applies them when the
// file's bytes change. A file that cannot be read, parsed or applied is
// refused: the rules in force stay, and the error is logged once, at
// Error, with the file, line and field at fault (until the file changes
// again). Each reload that takes effect is logged at Info. A nil logger
// logs nothing.
//
// Watch blocks until ctx is done and returns ctx's error: run it in a
// goroutine of your own, and cancel ctx to stop it. The file is read
// whole each time, which suits files that are replaced by a rename (as
// editors and Kubernetes ConfigMaps do) as well as those written in
// place.
func (r *Limiter) Watch(ctx context.Context, path string, interval time.Duration, logger *slog.Logger) error {
	if interval <= 0 {
		interval = time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	seen := r.Rules().sum // bytes already applied or refused
	var failed string     // the last read error logged
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		data, err := readFile(path)
		if err != nil {
			if err.Error() != failed {
				failed = err.Error()
				logger.Error("rules: cannot read the rules file; the rules in force stay", "file", path, "err", err)
			}
			continue
		}
		failed = ""
		sum := sha256.Sum256(data)
		if sum == seen {
			continue
		}
		seen = sum
		s, err := Parse(path, data)
		if err == nil {
			err = r.Apply(s)
		}
		if err != nil {
			logger.Error("rules: rules file refused; the rules in force stay", "file", path, "err", err)
			continue
		}
		logger.Info("rules: rules file applied", "file", path, "policies", len(s.policies))
	}
}
