package global

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// maxCensus is the most nodes a census believes: a count beyond it was
// written by no fleet of this library's (a sorted set someone else
// filled), and would shrink every node's fail-static share to nothing.
const maxCensus = 1 << 20

// census registers a node as live in a sorted set of the fleet's nodes
// (scored by Redis's time, µs), drops those not registered within the
// horizon, keeps the set for two horizons, and returns how many are
// left. KEYS[1] the set. ARGV: node, horizon_us. Returns {count}.
var censusScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local horizon = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now - horizon))
redis.call('PEXPIRE', KEYS[1], math.ceil(2 * horizon / 1000))
return {redis.call('ZCARD', KEYS[1])}
`)

// Census registers node as live and returns how many nodes have
// registered within horizon, node included: the fleet's size, for a node
// that learns it from no lease (one whose keys are all Strict), so that
// a Strict policy's fail-static bucket is its part of the limit, not the
// whole of it. One small script in one round trip; the fleet's nodes are
// one sorted set, Config.Prefix + "nodes", which no key's state is named
// (those names hold a '{').
func (r redisStore) Census(ctx context.Context, node string, horizon time.Duration) (int, error) {
	if node == "" || len(node) > r.cfg.MaxKeyLen {
		return 0, fmt.Errorf("%w: Census's node is %d bytes; it must be 1 to RedisConfig.MaxKeyLen (%d)", fleet.ErrInvalid, len(node), r.cfg.MaxKeyLen)
	}
	if horizon < time.Millisecond {
		return 0, fmt.Errorf("%w: Census's horizon is %v; it must be at least 1ms", fleet.ErrInvalid, horizon)
	}
	key := r.cfg.Prefix + "nodes"
	v, err := r.runOne(ctx, scriptCall{script: censusScript, keys: []string{key}, args: []any{node, micros(horizon)}, reply: 1})
	if err != nil {
		return 0, err
	}
	if err := r.check(key, bound{"a count of nodes", v[0], 1, maxCensus}); err != nil {
		return 0, err
	}
	return int(v[0]), nil
}
