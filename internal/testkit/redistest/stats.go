package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Commands returns how many commands the server has executed since it
// started or since the last ResetStats, by name, from INFO commandstats.
// Commands run inside Lua scripts are counted too, each under its own
// name, as Redis counts them. INFO and CONFIG, which this package sends,
// and HELLO, which opens every connection, are left out.
func (s *Server) Commands(tb testing.TB) map[string]int64 {
	tb.Helper()
	return parseCommandStats(s.commandStats(tb), "calls")
}

// CommandTimes returns the time the server has spent in each command
// since it started or since the last ResetStats, in microseconds, as
// Commands counts them: a script's time includes its commands'.
func (s *Server) CommandTimes(tb testing.TB) map[string]int64 {
	tb.Helper()
	return parseCommandStats(s.commandStats(tb), "usec")
}

func (s *Server) commandStats(tb testing.TB) string {
	tb.Helper()
	c := redis.NewClient(s.Options())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO commandstats on %s: %v", s.Addr, err)
	}
	return info
}

// TotalCommands sums Commands.
func (s *Server) TotalCommands(tb testing.TB) int64 {
	tb.Helper()
	var n int64
	for _, v := range s.Commands(tb) {
		n += v
	}
	return n
}

// ResetStats zeroes the server's command counters (CONFIG RESETSTAT).
func (s *Server) ResetStats(tb testing.TB) {
	tb.Helper()
	c := redis.NewClient(s.Options())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		tb.Fatalf("redistest: CONFIG RESETSTAT on %s: %v", s.Addr, err)
	}
}

// parseCommandStats reads field of lines like
// "cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,...".
func parseCommandStats(info, field string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" || name == "hello" || strings.HasPrefix(name, "config|") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					out[name] = n
				}
			}
		}
	}
	return out
}

// CPU returns the CPU time the server has used since it started, system
// and user together (INFO cpu: used_cpu_sys + used_cpu_user).
func (s *Server) CPU(tb testing.TB) time.Duration {
	tb.Helper()
	c := redis.NewClient(s.Options())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO cpu on %s: %v", s.Addr, err)
	}
	return parseCPU(info)
}

// parseCPU sums used_cpu_sys and used_cpu_user, in seconds, of an INFO
// cpu reply.
func parseCPU(info string) time.Duration {
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			if x, err := strconv.ParseFloat(v, 64); err == nil {
				sec += x
			}
		}
	}
	return time.Duration(sec * float64(time.Second))
}
