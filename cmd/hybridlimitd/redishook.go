package main

import (
	"context"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// redisCounter is a go-redis hook that counts the commands the node
// sends to Redis and the round trips they take (a pipeline is one), for
// hybridlimit_redis_commands_total and _round_trips_total. A script's
// own calls inside Redis are not seen here: Redis's INFO commandstats
// counts those.
type redisCounter struct{ commands, trips atomic.Uint64 }

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.commands.Add(1)
		c.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.commands.Add(uint64(len(cmds)))
		c.trips.Add(1)
		return next(ctx, cmds)
	}
}

// collectors are c's counters as Prometheus metrics.
func (c *redisCounter) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hybridlimit_redis_commands_total", Help: "Commands this node sent to Redis (a script call is one)."},
			func() float64 { return float64(c.commands.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hybridlimit_redis_round_trips_total", Help: "Round trips to Redis: a command alone, or a pipeline."},
			func() float64 { return float64(c.trips.Load()) }),
	}
}
