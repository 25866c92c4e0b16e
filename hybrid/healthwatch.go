package hybrid

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hybridlimit/hybridlimit/partition"
)

// healthWatch is the Health last told to Config.OnHealthChange and the
// Logger, the breakers' states last logged, and the Logger's budget.
type healthWatch struct {
	mu       sync.Mutex // serializes watchHealth, so that calls never overlap
	last     partition.Health
	breakers []string // each fleet's breaker state, as last logged
	since    int64    // when the budget's minute began (l.now)
	lines    int      // lines logged in it
	dropped  int      // lines the budget held back since the last logged
}

// logBudget is how many lines watchHealth logs a minute: a link that
// flaps changes level, breaker and step every few syncs, and an operator
// needs the first lines and a count, not a line per flap.
const logBudget = 10

// log logs msg at level within the budget; a line held back is counted,
// and the count goes with the next line logged, or, once the minute is
// over, with a line that says where things stand (rollBudget), so that
// a line held back cannot leave the log saying what no longer holds for
// more than a minute. w.mu is held.
func (l *Limiter) log(w *healthWatch, level slog.Level, msg string, attrs ...any) {
	if w.lines >= logBudget {
		w.dropped++
		return
	}
	w.lines++
	if w.dropped > 0 {
		attrs = append(attrs, slog.Int("held_back", w.dropped))
		w.dropped = 0
	}
	l.cfg.Logger.Log(context.Background(), level, msg, attrs...)
}

// rollBudget starts a new minute of the budget when the last is over,
// first logging where things stand if lines were held back in it. w.mu
// is held.
func (l *Limiter) rollBudget(w *healthWatch, h partition.Health) {
	now := l.now()
	if now-w.since < int64(time.Minute) {
		return
	}
	w.since, w.lines = now, 0
	if w.dropped > 0 { // the budget is new: this line is logged
		level := slog.LevelWarn
		if h.Level == partition.Healthy {
			level = slog.LevelInfo
		}
		l.log(w, level, "hybridlimit: lines held back in the last minute; health now",
			slog.String("level", h.Level.String()), slog.Float64("factor", h.Factor), slog.Any("breakers", w.breakers))
	}
}

// watchHealth tells Config.OnHealthChange and the Logger when Health's
// level has changed since it last looked, and the Logger when a fleet's
// circuit breaker changed state or the fallback ladder stepped: once per
// change, never per request, and at most logBudget lines a minute. It
// runs after each sync round, with no lock of the sync loop held, so
// that the callback may call the Limiter.
func (l *Limiter) watchHealth() {
	w := &l.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	h := l.Health()
	l.rollBudget(w, h)
	l.watchBreakers(w)
	if h.Level == w.last.Level {
		if h.Level != partition.Healthy && h.Factor != w.last.Factor {
			l.log(w, slog.LevelWarn, "hybridlimit: the fallback ladder stepped",
				slog.String("level", h.Level.String()), slog.Float64("factor", h.Factor), slog.Duration("cut_off", h.Since))
		}
		w.last.Factor = h.Factor
		return
	}
	from := w.last
	w.last = h
	attrs := []any{
		slog.String("from", from.Level.String()), slog.String("to", h.Level.String()),
		slog.Float64("factor", h.Factor), slog.Int("failing_keys", h.FailingKeys),
	}
	if h.Level == partition.Healthy {
		l.log(w, slog.LevelInfo, "hybridlimit: health changed", attrs...)
	} else {
		l.log(w, slog.LevelWarn, "hybridlimit: health changed", attrs...)
	}
	if l.cfg.OnHealthChange != nil {
		l.cfg.OnHealthChange(from, h)
	}
}

// watchBreakers logs each fleet's circuit breaker when its state has
// changed since it was last logged. w.mu is held.
func (l *Limiter) watchBreakers(w *healthWatch) {
	if w.breakers == nil {
		w.breakers = make([]string, len(l.fleets))
		for i := range w.breakers {
			w.breakers[i] = "closed"
		}
	}
	now := l.wall(l.now())
	for i, f := range l.fleets {
		st := f.state(now)
		if st == w.breakers[i] {
			continue
		}
		level := slog.LevelWarn
		if st == "closed" {
			level = slog.LevelInfo
		}
		l.log(w, level, "hybridlimit: circuit breaker changed", slog.String("fleet", f.name), slog.String("from", w.breakers[i]), slog.String("to", st))
		w.breakers[i] = st
	}
}
