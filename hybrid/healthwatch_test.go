package hybrid_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/partition"
)

// levels records the changes OnHealthChange is told of.
type levels struct {
	mu  sync.Mutex
	got []string
	l   *hybrid.Limiter
}

func (v *levels) note(from, to partition.Health) {
	if v.l != nil {
		_ = v.l.Health() // the callback may call the Limiter
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.got = append(v.got, from.Level.String()+">"+to.Level.String())
}

func (v *levels) seen() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.got...)
}

// TestOnHealthChange cuts a node off for 7 s and heals it: OnHealthChange
// and the Logger hear each change of level once (Healthy to Degraded at
// the first failed sync, to Emergency when the ladder first cuts the
// share, at 5 s, and back), and nothing in between however many syncs
// fail. Before, a service learned of an outage only by polling Health.
func TestOnHealthChange(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	var seen levels
	s := newScripted(1_000_000, "k")
	l, clk := manual(t, hybrid.Config{Syncer: s, OnHealthChange: seen.note,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	ctx := context.Background()
	admit(t, l, "k", 1)
	require.NoError(t, l.SyncOnce(ctx))
	assert.Empty(t, seen.seen(), "a healthy start is no change")

	s.set(errDown, 1)
	for range 70 {
		clk.Advance(100 * time.Millisecond)
		admit(t, l, "k", 1)
		_ = l.SyncOnce(ctx)
	}
	s.set(nil, 1)
	for range 30 { // the breaker's cool-down is one Interval: back within a few
		clk.Advance(100 * time.Millisecond)
		_ = l.SyncOnce(ctx)
	}
	assert.Equal(t, []string{"healthy>degraded", "degraded>emergency", "emergency>healthy"}, seen.seen())
	assert.Equal(t, partition.Healthy, l.Health().Level)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var changes []string
	for _, line := range lines {
		if strings.Contains(line, "health changed") {
			changes = append(changes, line)
		}
	}
	require.Len(t, changes, 3, "one line a change:\n%s", logs.String())
	assert.Contains(t, changes[0], "level=WARN")
	assert.Contains(t, changes[0], "to=degraded")
	assert.Contains(t, changes[1], "to=emergency")
	assert.Contains(t, changes[2], "level=INFO")
	assert.Contains(t, changes[2], "to=healthy")
}

// TestOnHealthChangeRedis stops and restarts a real Redis under a node
// syncing in the background: the callback hears Degraded within a second
// of the stop and Healthy within a few of the restart, and may call the
// Limiter from within.
func TestOnHealthChangeRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	r, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t)})
	require.NoError(t, err)
	seen := &levels{}
	l, err := hybrid.New(hybrid.Config{
		Node:           "watched",
		Policies:       []hybrid.Policy{{Name: "api", Limit: 100, Window: time.Second}},
		Syncer:         r,
		Interval:       50 * time.Millisecond,
		OnHealthChange: seen.note,
	})
	require.NoError(t, err)
	seen.l = l
	defer func() { _ = l.Close() }()
	_, err = l.Allow("k")
	require.NoError(t, err)

	srv.Stop()
	require.Eventually(t, func() bool { return len(seen.seen()) >= 1 }, 3*time.Second, 10*time.Millisecond)
	assert.Equal(t, "healthy>degraded", seen.seen()[0])
	srv.Restart(t)
	require.Eventually(t, func() bool {
		got := seen.seen()
		return len(got) >= 2 && got[len(got)-1] == "degraded>healthy"
	}, 10*time.Second, 10*time.Millisecond, "changes: %v", seen.seen())
	assert.Equal(t, []string{"healthy>degraded", "degraded>healthy"}, seen.seen())
}

// TestLogsBreakersLadderAndBudget: cut off for 70 s, a node logs its
// breaker opening, each step of the fallback ladder within a level (to a
// quarter at 1 m), and, healed, the breaker closing. A link that flaps
// every sync for a minute logs at most the budget, 10 lines, and the next
// line logged says how many were held back. Before, breaker transitions
// and ladder steps were not logged, and a flapping link logged every
// change.
func TestLogsBreakersLadderAndBudget(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := newScripted(1_000_000, "k")
	l, clk := manual(t, hybrid.Config{Syncer: s,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	ctx := context.Background()
	step := func() {
		clk.Advance(100 * time.Millisecond)
		admit(t, l, "k", 1)
		_ = l.SyncOnce(ctx)
	}
	admit(t, l, "k", 1)
	require.NoError(t, l.SyncOnce(ctx))
	s.set(errDown, 1)
	for range 700 { // 70 s
		step()
	}
	s.set(nil, 1)
	for range 30 {
		step()
	}
	text := logs.String()
	t.Log(text)
	assert.Contains(t, text, `msg="hybridlimit: circuit breaker changed" fleet=Syncer from=closed to=open`)
	assert.Contains(t, text, `msg="hybridlimit: the fallback ladder stepped" level=emergency factor=0.25`)
	assert.Contains(t, text, "to=closed")
	assert.Equal(t, partition.Healthy, l.Health().Level)

	// A minute of a link that fails every other sync.
	logs.Reset()
	clk.Advance(2 * time.Minute) // a fresh budget
	for i := range 600 {
		if i%2 == 0 {
			s.set(errDown, 1)
		} else {
			s.set(nil, 1)
		}
		step()
	}
	flapping := strings.Count(logs.String(), "\n")
	t.Logf("a minute of flapping: %d lines", flapping)
	assert.LessOrEqual(t, flapping, 2*10, "at most the budget a minute (two minutes may be touched)")
	// Back for good: within a minute a line says so, with what was held
	// back, though the budget held back the recovery's own lines.
	s.set(nil, 1)
	logs.Reset()
	for range 610 {
		step()
	}
	assert.Regexp(t, `lines held back in the last minute; health now" level=healthy .*held_back=[1-9]`, logs.String())
	assert.Equal(t, partition.Healthy, l.Health().Level)
}
