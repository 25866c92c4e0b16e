package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCommandStats(t *testing.T) {
	t.Parallel()
	info := "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hset:calls=3,usec=9\r\ncmdstat_info:calls=7,usec=1\r\ncmdstat_config|resetstat:calls=1,usec=1\r\nnoise\r\n"
	assert.Equal(t, map[string]int64{"evalsha": 12, "hset": 3}, parseCommandStats(info, "calls"))
	assert.Equal(t, map[string]int64{"evalsha": 340, "hset": 9}, parseCommandStats(info, "usec"))
}

func TestCommands(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	c := s.Client(t)
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "a", "1", 0).Err())
	require.NoError(t, c.Eval(ctx, "redis.call('SET', KEYS[1], '2'); return redis.call('GET', KEYS[1])", []string{"a"}).Err())
	got := s.Commands(t)
	assert.Equal(t, int64(2), got["set"], "one direct, one inside the script")
	assert.Equal(t, int64(1), got["get"])
	assert.Equal(t, int64(1), got["eval"])
	s.ResetStats(t)
	assert.Zero(t, s.TotalCommands(t))
}

func TestParseCPU(t *testing.T) {
	t.Parallel()
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\nused_cpu_sys_children:9.000000\r\n"
	assert.Equal(t, 1750*time.Millisecond, parseCPU(info))
}
