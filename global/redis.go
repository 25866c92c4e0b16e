// Package global is the Redis fleet: a fleet.Syncer whose nodes lease
// from per-key state in Redis (lease scripts, one pipelined round trip per
// sync), and the strict mode that decides each request in Redis. It runs
// on one Redis, a Redis Cluster (keys of one hash slot in one script
// call) or anything go-redis's UniversalClient reaches.
package global

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/internal/cfgerr"
	"github.com/hybridlimit/hybridlimit/internal/redisslot"
	"github.com/hybridlimit/hybridlimit/internal/store"
	"github.com/hybridlimit/hybridlimit/local"
)

// Defaults for the zero fields of a RedisConfig.
const (
	defaultPrefix    = "hl:"
	defaultTimeout   = 500 * time.Millisecond
	defaultMaxKeyLen = 256
)

// RedisConfig describes a Redis Syncer.
type RedisConfig struct {
	// Client is the connection to Redis: a *redis.Client, a
	// *redis.ClusterClient, a Sentinel-backed failover client or a ring,
	// as the user built it. Required.
	//
	// Its socket timeouts must not outlast Timeout, or a black-holed Redis
	// could hold a call longer than promised: set the client's
	// ContextTimeoutEnabled, or ReadTimeout and WriteTimeout no longer than
	// Timeout. NewRedis checks.
	Client redis.UniversalClient

	// Prefix starts every Redis key this package writes. Default "hl:".
	// It may not contain '{' or '}', which would break the
	// Cluster hash tags.
	Prefix string

	// Timeout bounds every call to Redis. Default 500ms.
	Timeout time.Duration

	// MaxKeyLen is the longest user key accepted, in bytes. Default 256.
	MaxKeyLen int
}

// Redis is a Syncer backed by Redis, and the strict per-request limiter.
// One Sync is one pipelined round trip per Redis node, however many keys
// it carries, and one script call for many keys (see leaseBatch); keys
// whose state records many nodes may take more round trips, so that no
// call holds Redis for long.
//
// A Redis is safe for concurrent use.
type Redis struct {
	cfg  RedisConfig
	addr string // for errors

	// crossSlot is set once Redis refused keys of several hash slots in
	// one call (CROSSSLOT) on a client that is not a Cluster's: a Redis
	// in Cluster mode. Every call then carries keys of one slot.
	crossSlot atomic.Bool

	// unheardUntil is until when (Unix µs) lease batches do not score the
	// node as heard, after a call failed (see unheardFor).
	unheardUntil atomic.Int64
}

var _ fleet.Syncer = (*Redis)(nil)

// NewRedis checks cfg and returns a Redis Syncer. It does not talk to
// Redis, so a service starts while Redis is down, or far away: its calls
// fail with ErrUnreachable until Redis answers, and the caller limits on
// its own meanwhile. Each script is sent to a Redis node by its first
// call there (see run). ctx is not used.
func NewRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	r, err := newRedis(cfg)
	if err != nil {
		return nil, cfgerr.Wrap(ErrInvalidConfig, err)
	}
	return r, nil
}

// ErrInvalidConfig is wrapped by every error NewRedis returns: the
// message names the field of RedisConfig at fault.
var ErrInvalidConfig = errors.New("global: invalid RedisConfig")

func newRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("global: RedisConfig.Client is nil; pass a go-redis client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("global: RedisConfig.Prefix %q contains '{' or '}', which would break Redis Cluster hash tags", cfg.Prefix)
	}
	switch {
	case cfg.Timeout == 0:
		cfg.Timeout = defaultTimeout
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("global: RedisConfig.Timeout is %v; it must be positive", cfg.Timeout)
	}
	switch {
	case cfg.MaxKeyLen == 0:
		cfg.MaxKeyLen = defaultMaxKeyLen
	case cfg.MaxKeyLen < 0:
		return nil, fmt.Errorf("global: RedisConfig.MaxKeyLen is %d; it must be positive", cfg.MaxKeyLen)
	}
	if err := checkClientTimeouts(cfg.Client, cfg.Timeout); err != nil {
		return nil, err
	}
	return &Redis{cfg: cfg, addr: addrOf(cfg.Client)}, nil
}

// MaxKeyLen is the longest key r accepts, in bytes: RedisConfig.MaxKeyLen
// or its default. A hybrid Limiter, which checks keys itself, must not
// accept longer ones, or their every call fails.
func (r redisStore) MaxKeyLen() int { return r.cfg.MaxKeyLen }

// checkClientTimeouts refuses a client whose socket timeouts would let a
// call outlive timeout: without ContextTimeoutEnabled, go-redis ignores
// the context's deadline on the socket and waits ReadTimeout (3s by
// default) on a Redis that stopped answering.
func checkClientTimeouts(c redis.UniversalClient, timeout time.Duration) error {
	var ctxOK bool
	var read, write time.Duration
	opts := "redis.Options"
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		ctxOK, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	case *redis.ClusterClient:
		o := c.Options()
		ctxOK, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
		opts = "redis.ClusterOptions"
	default:
		return nil // a Ring or a wrapper: the caller's responsibility
	}
	if ctxOK {
		return nil
	}
	// go-redis treats 0 as its 3s default and -1 as no timeout.
	if read <= 0 || read > timeout || write <= 0 || write > timeout {
		return fmt.Errorf("global: the Redis client may block longer than RedisConfig.Timeout (%v): build it with %s{ContextTimeoutEnabled: true}, or ReadTimeout and WriteTimeout of at most %v; it has ReadTimeout %v, WriteTimeout %v (0 is go-redis's 3s default)",
			timeout, opts, timeout, read, write)
	}
	return nil
}

// addrOf names the Redis c talks to, for errors: its address, or its
// seed addresses.
func addrOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr // "FailoverClient" for Sentinel
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		return strings.Join(addrs, ",")
	}
	return fmt.Sprintf("%T", c)
}

// redisKey builds the Redis key of key's shard (the zero Shard: key
// itself): the prefix, the key and shard as a hash tag so every key of
// one limit shares a slot, and a suffix. Braces and the escape character
// are percent-encoded, so any bytes are safe and the tag cannot end
// early; a shard ends the tag with "%#" and its number, which no key's
// encoding holds (see Shard).
func (r *Redis) redisKey(key string, shard fleet.Shard, suffix string) (string, error) {
	base, err := r.keyBase(key, shard)
	return base + suffix, err
}

// keyBase is every Redis key of key's shard but for the suffix:
// prefix{tag}:. MaxKeyLen bounds key, not what a shard adds.
func (r *Redis) keyBase(key string, shard fleet.Shard) (string, error) {
	if len(key) > r.cfg.MaxKeyLen {
		return "", fmt.Errorf("%w: key of %d bytes is longer than RedisConfig.MaxKeyLen %d", fleet.ErrInvalid, len(key), r.cfg.MaxKeyLen)
	}
	var b strings.Builder
	b.Grow(len(r.cfg.Prefix) + len(key) + 3)
	b.WriteString(r.cfg.Prefix)
	b.WriteByte('{')
	redisslot.WriteTag(&b, key)
	b.WriteString(shard.String()) // "" for the key itself
	b.WriteString("}:")
	return b.String(), nil
}

// strictCall is a call of gcra or sw, by limit's algorithm, on key's
// strict state, with n as the last argument, answering reply numbers;
// keyBase is key's.
func strictCall(base string, limit fleet.Limit, n int64, gcra, sw *redis.Script, reply int) scriptCall {
	if limit.Algorithm == local.TokenBucket {
		return scriptCall{gcra, []string{base + "gcra"}, []any{limit.Limit, micros(limit.Window), limit.Capacity(), n}, reply, 0}
	}
	return scriptCall{sw, []string{base + "sw"}, []any{limit.Limit, micros(limit.Window), n}, reply, 0}
}

func micros(d time.Duration) int64 { return max(int64(d/time.Microsecond), 1) }

// Allow decides n requests for key against limit in Redis: one round trip
// per call, exact across the fleet. It is the strict mode, and the
// baseline the hybrid mode is measured against. n may be 0, to learn
// how key stands, deciding nothing. While key is marked as split into
// shards (MarkShards), Allow decides nothing and says so in
// Decision.Shards.
func (r redisStore) Allow(ctx context.Context, key string, limit fleet.Limit, n int64) (store.Decision, error) {
	return r.AllowShard(ctx, key, fleet.Shard{}, limit, n)
}

// AllowShard is Allow on one of key's shards (see fleet.ShardsOf): the part of
// a key split by MarkShards that a request is decided on, against
// limit, the shard's part of the key's.
func (r redisStore) AllowShard(ctx context.Context, key string, shard fleet.Shard, limit fleet.Limit, n int64) (store.Decision, error) {
	if err := limit.Validate(); err != nil {
		return store.Decision{}, fmt.Errorf("%w: %v", fleet.ErrInvalid, err)
	}
	if n < 0 {
		return store.Decision{}, fmt.Errorf("%w: Allow's n is %d; it must not be negative", fleet.ErrInvalid, n)
	}
	base, err := r.keyBase(key, shard)
	if err != nil {
		return store.Decision{}, err
	}
	call := strictCall(base, limit, min(n, fleet.MaxLimit), strictGCRA, strictSlidingWindow, 4)
	call.keys = append(call.keys, base+"shards")
	v, err := r.runOne(ctx, call)
	if err != nil {
		return store.Decision{}, err
	}
	return r.decisionOf(key+shard.String(), limit, v)
}
