package global

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults for the zero fields of a RedisConfig.
const (
	DefaultPrefix    = "hl:"
	DefaultTimeout   = 500 * time.Millisecond
	DefaultMaxKeyLen = 256
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

	// Prefix starts every Redis key this package writes. Default
	// DefaultPrefix. It may not contain '{' or '}', which would break the
	// Cluster hash tags.
	Prefix string

	// Timeout bounds every call to Redis. Default DefaultTimeout.
	Timeout time.Duration

	// MaxKeyLen is the longest user key accepted, in bytes. Default
	// DefaultMaxKeyLen.
	MaxKeyLen int
}

// Redis is a Syncer backed by Redis, and the strict per-request limiter.
// One Sync is one pipelined round trip per Redis node, however many keys
// it carries.
//
// A Redis is safe for concurrent use.
type Redis struct {
	cfg  RedisConfig
	addr string // for errors
}

var _ Syncer = (*Redis)(nil)

// NewRedis checks cfg and returns a Redis Syncer. It does not talk to
// Redis, so a service starts while Redis is down, or far away: its calls
// fail with ErrUnreachable until Redis answers, and the caller limits on
// its own meanwhile. Each script is sent to a Redis node by its first
// call there (see run). ctx is not used.
func NewRedis(ctx context.Context, cfg RedisConfig) (*Redis, error) {
	if cfg.Client == nil {
		return nil, errors.New("global: RedisConfig.Client is nil; pass a go-redis client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("global: RedisConfig.Prefix %q contains '{' or '}', which would break Redis Cluster hash tags", cfg.Prefix)
	}
	switch {
	case cfg.Timeout == 0:
		cfg.Timeout = DefaultTimeout
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("global: RedisConfig.Timeout is %v; it must be positive", cfg.Timeout)
	}
	switch {
	case cfg.MaxKeyLen == 0:
		cfg.MaxKeyLen = DefaultMaxKeyLen
	case cfg.MaxKeyLen < 0:
		return nil, fmt.Errorf("global: RedisConfig.MaxKeyLen is %d; it must be positive", cfg.MaxKeyLen)
	}
	if err := checkClientTimeouts(cfg.Client, cfg.Timeout); err != nil {
		return nil, err
	}
	return &Redis{cfg: cfg, addr: addrOf(cfg.Client)}, nil
}

// MaxKeyLen is the longest key r accepts, in bytes: RedisConfig.MaxKeyLen
// or its default. A caller that checks keys itself, such as a hybrid
// Limiter, must not accept longer ones, or their every call fails.
func (r *Redis) MaxKeyLen() int { return r.cfg.MaxKeyLen }

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

// redisKey builds the Redis key for a user key: the prefix, the key as a
// hash tag so every key of one limit shares a slot, and a suffix. Braces
// and the escape character are percent-encoded, so any bytes are safe and
// the tag cannot end early.
func (r *Redis) redisKey(key, suffix string) (string, error) {
	base, err := r.keyBase(key)
	return base + suffix, err
}

// keyBase is every Redis key of key but for the suffix: prefix{tag}:.
func (r *Redis) keyBase(key string) (string, error) {
	if len(key) > r.cfg.MaxKeyLen {
		return "", fmt.Errorf("%w: key of %d bytes is longer than RedisConfig.MaxKeyLen %d", ErrInvalid, len(key), r.cfg.MaxKeyLen)
	}
	var b strings.Builder
	b.Grow(len(r.cfg.Prefix) + len(key) + 3)
	b.WriteString(r.cfg.Prefix)
	b.WriteByte('{')
	writeTag(&b, key)
	b.WriteString("}:")
	return b.String(), nil
}

// strictCall is a call of gcra or sw, by limit's algorithm, on key's
// strict state, with n as the last argument; keyBase is key's.
func strictCall(base string, limit Limit, n int64, gcra, sw *redis.Script) scriptCall {
	if limit.Algorithm == TokenBucket {
		return scriptCall{gcra, []string{base + "gcra"}, []any{limit.Limit, micros(limit.Window), limit.burst(), n}}
	}
	return scriptCall{sw, []string{base + "sw"}, []any{limit.Limit, micros(limit.Window), n}}
}

// writeTag writes key as a hash tag: the characters that would end or
// open one, and the escape itself, as %XX.
func writeTag(b *strings.Builder, key string) {
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '{', '}', '%':
			fmt.Fprintf(b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
}

// Sync reports req's usage and leases each key's next tokens, in one
// pipelined round trip per Redis node.
func (r *Redis) Sync(ctx context.Context, req *Request) (*Response, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Node == "" { // the node's lease and demand are kept under its name
		return nil, fmt.Errorf("%w: Request.Node is empty", ErrInvalid)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()

	resp := &Response{Grants: make([]Grant, len(req.Keys))}
	calls := make([]scriptCall, 0, len(req.Keys))
	idx := make([]int, 0, len(req.Keys))
	interval := micros(req.Interval)
	for i, u := range req.Keys {
		call, err := r.leaseCall(req.Node, interval, req.Shares == Equal, u)
		if err != nil {
			resp.Grants[i].Err = err
			continue
		}
		calls = append(calls, call)
		idx = append(idx, i)
	}
	results, err := r.run(ctx, calls)
	if err != nil {
		return nil, err
	}
	for j, res := range results {
		g := &resp.Grants[idx[j]]
		if res.err != nil {
			g.Err = res.err
			continue
		}
		v := res.vals
		if len(v) < 10 {
			g.Err = fmt.Errorf("global: lease script for key %q answered %d values; want 10", req.Keys[idx[j]].Key, len(v))
			continue
		}
		if v[8] > 0 {
			if g.Err = badShards(req.Keys[idx[j]].Key, v[8]); g.Err == nil {
				*g = Grant{Shards: int(v[8]), ShardedFor: time.Duration(v[9]) * time.Microsecond}
			}
			continue
		}
		*g = Grant{
			Lease:      v[0],
			TTL:        time.Duration(v[1]) * time.Microsecond,
			Used:       v[2],
			Remaining:  v[3],
			Nodes:      int(v[4]),
			Weight:     float64(v[5]) / 1e6,
			ResetAfter: time.Duration(v[6]) * time.Microsecond,
		}
	}
	return resp, nil
}

func (r *Redis) leaseCall(node string, interval int64, equal bool, u Usage) (scriptCall, error) {
	if err := u.Limit.Validate(); err != nil {
		return scriptCall{}, fmt.Errorf("%w: key %q: %v", ErrInvalid, u.Key, err)
	}
	if u.Consumed < 0 || u.Demand < 0 {
		return scriptCall{}, fmt.Errorf("%w: key %q: Consumed and Demand must not be negative", ErrInvalid, u.Key)
	}
	base, err := r.keyBase(u.Key)
	if err != nil {
		return scriptCall{}, err
	}
	window := micros(u.Limit.Window)
	script := leaseTokenBucket
	if u.Limit.Algorithm == SlidingWindow {
		script = leaseSlidingWindow
	}
	// The state outlives a full refill and a few intervals.
	stale := staleAfter(interval)
	ttl := (2*window+10*interval)/1000 + 1
	return scriptCall{
		script: script,
		keys:   []string{base + "lease", base + "lshards"},
		args: []any{node, u.Limit.Limit, window, u.Limit.burst(), u.Consumed, u.Demand,
			interval, stale, ttl, equalArg(equal)},
	}, nil
}

// staleAfter is how long, in microseconds, a node that syncs every
// interval microseconds may go unheard before it stops counting as
// active and its lease is forgotten: three intervals.
func staleAfter(interval int64) int64 { return 3 * interval }

func equalArg(equal bool) string {
	if equal {
		return "1"
	}
	return "0"
}

func micros(d time.Duration) int64 { return max(int64(d/time.Microsecond), 1) }

// Decision is the outcome of one strict, per-request decision in Redis.
type Decision struct {
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration // zero when allowed; -1 if the cost can never be admitted
	ResetAfter time.Duration

	// Shards, when not zero, says that nothing was decided: the key is
	// split fleet-wide into Shards shards (see MarkShards) for ShardedFor
	// more, and the request must be decided on ShardKeys(key, Shards).
	Shards     int
	ShardedFor time.Duration
}

// Allow decides n requests for key against limit in Redis: one round trip
// per call, exact across the fleet. It is the strict mode, and the
// baseline the hybrid mode is measured against. While key is marked as
// split into shards (MarkShards), Allow decides nothing and says so in
// Decision.Shards.
func (r *Redis) Allow(ctx context.Context, key string, limit Limit, n int64) (Decision, error) {
	if err := limit.Validate(); err != nil {
		return Decision{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	base, err := r.keyBase(key)
	if err != nil {
		return Decision{}, err
	}
	call := strictCall(base, limit, n, strictGCRA, strictSlidingWindow)
	call.keys = append(call.keys, base+"shards")
	v, err := r.runOne(ctx, call)
	if err != nil {
		return Decision{}, err
	}
	if v[0] == 2 {
		if err := badShards(key, v[1]); err != nil {
			return Decision{}, err
		}
		return Decision{Shards: int(v[1]), ShardedFor: time.Duration(v[3]) * time.Microsecond}, nil
	}
	d := Decision{Allowed: v[0] == 1, Remaining: v[1], ResetAfter: time.Duration(v[3]) * time.Microsecond}
	if v[2] < 0 {
		d.RetryAfter = -1
	} else {
		d.RetryAfter = time.Duration(v[2]) * time.Microsecond
	}
	return d, nil
}

// badShards reports a shard count found in the store that no node could
// have set (see MaxShards).
func badShards(key string, n int64) error {
	if n > MaxShards {
		return fmt.Errorf("%w: key %q is marked as split into %d shards, more than MaxShards (%d)", ErrInvalid, key, n, MaxShards)
	}
	return nil
}

// MarkShards records, for the whole fleet, that key's strict decisions go
// to shards for the next ttl: every Allow on key itself then answers
// with Decision.Shards instead of deciding, so that no node decides on
// the whole key while others decide on its shards, which would admit up
// to twice the limit. If key is already marked, its shard count stays and
// only ttl is renewed. MarkShards returns the shard count in force.
func (r *Redis) MarkShards(ctx context.Context, key string, shards int, ttl time.Duration) (int, error) {
	if shards < 2 || shards > MaxShards || ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: MarkShards needs 2 to MaxShards (%d) shards and a ttl of 1ms or more; got %d, %v", ErrInvalid, MaxShards, shards, ttl)
	}
	marker, err := r.redisKey(key, "shards")
	if err != nil {
		return 0, err
	}
	v, err := r.runOne(ctx, scriptCall{markShards, []string{marker}, []any{shards, ttl.Milliseconds()}})
	if err != nil {
		return 0, err
	}
	return int(v[0]), nil
}

// ChargeAtLeast makes key's strict state show at least used spent now,
// as if used had just been admitted, unless it already shows as much. It
// is how a key merged back from its shards takes over what they had
// spent. Unlike Allow, charging twice charges once, so every node of a
// fleet may charge the same key as it merges back.
func (r *Redis) ChargeAtLeast(ctx context.Context, key string, limit Limit, used int64) error {
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if used <= 0 {
		return nil
	}
	base, err := r.keyBase(key)
	if err != nil {
		return err
	}
	_, err = r.runOne(ctx, strictCall(base, limit, used, chargeGCRA, chargeSlidingWindow))
	return err
}

// MarkLeaseShards marks, for the whole fleet, that key's leases are
// split into shards: while the mark stands, Sync on key grants nothing,
// applies none of a report, and answers with Grant.Shards, so that
// nodes lease from, and report to, ShardKeys(key, n) instead. The mark
// stands until ttl from now, or later if it was already marked for
// longer (it is never shortened); with shards 0, a mark is only
// extended, never set. After its end, Sync goes on answering with the
// shard count and no time left until EndLeaseShards, so that no node
// leases from key before what the shards spent has been charged to it;
// the mark is dropped by itself after two of limit's windows and twice
// ttl, when its shards' spending no longer counts.
//
// It returns the shard count in force and how long the mark stands: 0
// for a mark that has ended and awaits its merge; 0 and 0 if shards is
// 0 and there was no mark.
func (r *Redis) MarkLeaseShards(ctx context.Context, key string, shards int, ttl time.Duration, limit Limit) (n int, left time.Duration, err error) {
	switch {
	case shards == 1 || shards < 0 || shards > MaxShards || ttl < time.Millisecond:
		return 0, 0, fmt.Errorf("%w: MarkLeaseShards needs 0, or 2 to MaxShards (%d), shards and a ttl of 1ms or more; got %d, %v", ErrInvalid, MaxShards, shards, ttl)
	case limit.Validate() != nil:
		return 0, 0, fmt.Errorf("%w: %v", ErrInvalid, limit.Validate())
	}
	marker, err := r.redisKey(key, "lshards")
	if err != nil {
		return 0, 0, err
	}
	keep := (2*limit.Window + 2*ttl).Milliseconds() + 1
	v, err := r.runOne(ctx, scriptCall{markLease, []string{marker}, []any{shards, micros(ttl), keep}})
	if err != nil {
		return 0, 0, err
	}
	return int(v[0]), time.Duration(v[1]) * time.Microsecond, nil
}

// LeaseShardMark reports key's lease mark (see MarkLeaseShards): its
// shard count, 0 if there is none, and how long it stands, 0 if it has
// ended and awaits its merge.
func (r *Redis) LeaseShardMark(ctx context.Context, key string) (shards int, left time.Duration, err error) {
	marker, err := r.redisKey(key, "lshards")
	if err != nil {
		return 0, 0, err
	}
	v, err := r.runOne(ctx, scriptCall{readLeaseMark, []string{marker}, nil})
	if err != nil {
		return 0, 0, err
	}
	return int(v[0]), time.Duration(v[1]) * time.Microsecond, nil
}

// EndLeaseShards drops key's lease mark if it has ended, so that Sync
// leases from key again: call it once key has been charged with what its
// shards spent (ChargeLeasesAtLeast with LeaseUsed of the shards). It
// reports whether key is no longer marked.
func (r *Redis) EndLeaseShards(ctx context.Context, key string) (bool, error) {
	marker, err := r.redisKey(key, "lshards")
	if err != nil {
		return false, err
	}
	v, err := r.runOne(ctx, scriptCall{endLeaseMark, []string{marker}, nil})
	if err != nil {
		return false, err
	}
	return v[0] == 1, nil
}

// LeaseUsed returns what the lease states of keys (as Sync keeps them)
// show spent now under limit, leases included, summed: how a key merged
// back from its shards learns what they had spent. It decides and
// changes nothing, and takes one round trip per Redis node.
func (r *Redis) LeaseUsed(ctx context.Context, keys []string, limit Limit) (int64, error) {
	calls, err := r.leaseStateCalls(leaseUsed, keys, limit, 0, 0)
	if err != nil {
		return 0, err
	}
	res, err := r.runAll(ctx, calls)
	sum := int64(0)
	for _, v := range res {
		sum += v[0]
	}
	return sum, err
}

// ChargeLeasesAtLeast makes each of keys' lease states show at least used
// spent now under limit, unless it already shows as much. It is how a key
// split into shards, or merged back from them, takes over what was spent
// before, so that neither hands out a fresh bucket; charging twice
// charges once, so every node of a fleet may charge. Nodes not seen for
// three of the fleet's sync intervals are forgotten first, as Sync
// forgets them, so that a node coming back to a state it left long ago
// reports against no lease (a zero interval forgets nobody). One round
// trip per Redis node.
func (r *Redis) ChargeLeasesAtLeast(ctx context.Context, keys []string, limit Limit, used int64, interval time.Duration) error {
	if interval < 0 {
		return fmt.Errorf("%w: ChargeLeasesAtLeast's interval is %v; it must not be negative", ErrInvalid, interval)
	}
	stale := int64(0)
	if interval > 0 {
		stale = staleAfter(micros(interval))
	}
	calls, err := r.leaseStateCalls(chargeLease, keys, limit, max(used, 0), stale)
	if err != nil {
		return err
	}
	_, err = r.runAll(ctx, calls)
	return err
}

// leaseStateCalls builds one call of script per key's lease state.
func (r *Redis) leaseStateCalls(script *redis.Script, keys []string, limit Limit, n, stale int64) ([]scriptCall, error) {
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	window := micros(limit.Window)
	sw := "0"
	if limit.Algorithm == SlidingWindow {
		sw = "1"
	}
	// A charged state outlives two windows and a minute, as a lease
	// state kept alive by syncs would.
	ttl := (2*window)/1000 + 60_000
	calls := make([]scriptCall, 0, len(keys))
	for _, key := range keys {
		k, err := r.redisKey(key, "lease")
		if err != nil {
			return nil, err
		}
		calls = append(calls, scriptCall{script, []string{k}, []any{sw, limit.Limit, window, limit.burst(), n, ttl, stale}})
	}
	return calls, nil
}

// runOne runs one call within the configured timeout.
func (r *Redis) runOne(ctx context.Context, call scriptCall) ([]int64, error) {
	res, err := r.runAll(ctx, []scriptCall{call})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// runAll runs calls within the configured timeout, in one round trip per
// Redis node, and returns their replies, or the first error: an outage,
// or a call Redis refused. (Sync, whose keys fail one by one, uses run.)
func (r *Redis) runAll(ctx context.Context, calls []scriptCall) ([][]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res, err := r.run(ctx, calls)
	if err != nil {
		return nil, err
	}
	out := make([][]int64, len(res))
	for i, c := range res {
		if c.err != nil {
			return nil, c.err
		}
		out[i] = c.vals
	}
	return out, nil
}

type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

type callResult struct {
	vals []int64
	err  error
}

// run executes calls as EVALSHA in one pipeline; go-redis splits a
// Cluster pipeline by node, so that is one round trip per node. If a node
// lost its script cache (a restart, SCRIPT FLUSH), the calls that failed
// are retried once as EVAL, which sends the script's text, runs it and
// caches it again in one step: a cache flushed a second time between a
// separate reload and the retry cannot fail the call.
func (r *Redis) run(ctx context.Context, calls []scriptCall) ([]callResult, error) {
	out := make([]callResult, len(calls))
	if len(calls) == 0 {
		return out, nil
	}
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 0; ; attempt++ {
		pipe := r.cfg.Client.Pipeline()
		cmds := make([]*redis.Cmd, len(pending))
		for j, i := range pending {
			c := calls[i]
			if attempt == 0 {
				cmds[j] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
			} else {
				cmds[j] = c.script.Eval(ctx, pipe, c.keys, c.args...)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are per command, read below
		var retry []int
		for j, i := range pending {
			err := cmds[j].Err()
			switch {
			case err == nil:
				out[i].vals, out[i].err = int64s(cmds[j].Val())
			case redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0:
				retry = append(retry, i)
			case isUnreachable(err):
				return nil, r.unreachable(err)
			default:
				out[i].err = fmt.Errorf("%w: Redis %s, key %q: %w", ErrInvalid, r.addr, calls[i].keys[0], err)
			}
		}
		if len(retry) == 0 {
			return out, nil
		}
		pending = retry
	}
}

func int64s(v any) ([]int64, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("global: unexpected script reply %T", v)
	}
	out := make([]int64, len(list))
	for i, x := range list {
		switch x := x.(type) {
		case int64:
			out[i] = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("global: unexpected script reply %q", x)
			}
			out[i] = n
		default:
			return nil, fmt.Errorf("global: unexpected script reply element %T", x)
		}
	}
	return out, nil
}

// isUnreachable reports whether err means Redis could not be reached,
// did not answer in time, or answered that it takes no writes now, as
// opposed to rejecting the command. Every call this package makes
// writes (the lease and strict scripts keep their state in Redis), so a
// Redis that refuses writes can neither lease nor decide, for any key:
// out of memory under the noeviction policy (OOM), short of the
// replicas min-replicas-to-write asks for (NOREPLICAS), after a failed
// snapshot (MISCONF), a replica (READONLY), a replica cut off from its
// master (MASTERDOWN), loading its data (LOADING), busy in a long script
// (BUSY), a Cluster down or moving slots (CLUSTERDOWN, TRYAGAIN, MOVED,
// ASK), or a connection the server refuses to serve (NOAUTH, WRONGPASS,
// NOPERM, too many clients).
func isUnreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	msg := err.Error()
	if msg == "EOF" || strings.Contains(msg, "connection") || strings.Contains(msg, "max number of clients reached") {
		return true
	}
	for _, p := range unwritable {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// unwritable are the prefixes of Redis's errors that mean it takes no
// writes now, whatever the key (see isUnreachable).
var unwritable = []string{"OOM ", "NOREPLICAS ", "MISCONF ", "READONLY ", "MASTERDOWN ", "LOADING ", "BUSY ",
	"CLUSTERDOWN ", "TRYAGAIN ", "MOVED ", "ASK ", "NOAUTH ", "WRONGPASS ", "NOPERM "}

// unreachable wraps err, which isUnreachable, as ErrUnreachable, naming
// the Redis and, for a deadline, what it means: go-redis retries a call
// until the deadline, and its last error is then the deadline's.
func (r *Redis) unreachable(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: Redis %s did not answer in time (RedisConfig.Timeout is %v): %w", ErrUnreachable, r.addr, r.cfg.Timeout, err)
	}
	return fmt.Errorf("%w: Redis %s: %w", ErrUnreachable, r.addr, err)
}
