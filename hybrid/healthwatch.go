package hybrid

import (
	"log/slog"
	"sync"

	"github.com/hybridlimit/hybridlimit/partition"
)

// healthWatch is the Health level last told to Config.OnHealthChange and
// the Logger.
type healthWatch struct {
	mu   sync.Mutex // serializes watchHealth, so that calls never overlap
	last partition.Health
}

// watchHealth tells Config.OnHealthChange and the Logger when Health's
// level has changed since it last looked: once per change, never per
// request. It runs after each sync round, with no lock of the sync loop
// held, so that the callback may call the Limiter.
func (l *Limiter) watchHealth() {
	w := &l.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	h := l.Health()
	if h.Level == w.last.Level {
		return
	}
	from := w.last
	w.last = h
	attrs := []any{
		slog.String("from", from.Level.String()), slog.String("to", h.Level.String()),
		slog.Float64("factor", h.Factor), slog.Int("failing_keys", h.FailingKeys),
	}
	if h.Level == partition.Healthy {
		l.cfg.Logger.Info("hybridlimit: health changed", attrs...)
	} else {
		l.cfg.Logger.Warn("hybridlimit: health changed", attrs...)
	}
	if l.cfg.OnHealthChange != nil {
		l.cfg.OnHealthChange(from, h)
	}
}
