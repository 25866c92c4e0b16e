package global

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// scriptCall is one script to run on keys with args, and how many
// numbers its reply holds; or, for a batch of keys (see leaseBatch),
// how many numbers each key's reply holds, batch being how many keys.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	reply  int
	batch  int // keys in a batch; 0 for a call of one reply
}

// callResult is a call's outcome: its numbers, or, for a batch, each
// key's outcome in items; or the call's error, every key's.
type callResult struct {
	vals  []int64
	items []callResult
	err   error
	down  bool // err isUnreachable: the call had no answer; a batch's every key had none
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

// run executes calls as EVALSHA, in one round trip per Redis node: one
// pipeline, or on a Cluster one per master (see runByMaster).
//
// An error that means Redis takes no calls now (see isUnreachable) fails
// its own call, wrapping ErrUnreachable, and fails them all, as run's
// error, when no call had an answer. So a Cluster master that is down
// fails only the calls for its slots: the others' replies, which have
// taken from their buckets, are not thrown away. Any other error fails
// its own call. A reply is checked for its length, and each call's
// caller checks its numbers.
func (r *Redis) run(ctx context.Context, calls []scriptCall) ([]callResult, error) {
	out := make([]callResult, len(calls))
	if len(calls) == 0 {
		return out, nil
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if cc, ok := r.cfg.Client.(*redis.ClusterClient); ok {
		r.runByMaster(ctx, cc, calls, all, out)
	} else {
		r.pipeline(ctx, r.cfg.Client, r.addr, calls, all, out)
	}
	var first error
	for _, c := range out {
		if !c.down {
			return out, nil
		}
		if first == nil {
			first = c.err
			if first == nil { // a batch whose every key had no answer
				first = c.items[0].err
			}
		}
	}
	return nil, first
}

// runByMaster runs the calls idx of calls on a Cluster in one pipeline
// per master, all at once, rather than in one pipeline of cc's. cc runs
// each master's part of its pipeline apart too, but it retries the part
// of a master that does not answer until ctx's deadline, and then marks
// every command of the pipeline with the deadline's error, the replies
// of the masters that answered included: the grants those masters took
// from their buckets would be thrown away, and their keys fail with the
// dead master's. A call a master redirects (MOVED, ASK: its slot is
// moving) is run again through cc, which follows redirects and learns
// the new slot map.
func (r *Redis) runByMaster(ctx context.Context, cc *redis.ClusterClient, calls []scriptCall, idx []int, out []callResult) {
	groups := map[*redis.Client][]int{}
	for _, i := range idx {
		m, err := cc.MasterForKey(ctx, calls[i].keys[0])
		if err != nil { // no slot map yet: cc finds one, or fails every call
			r.pipeline(ctx, cc, r.addr, calls, idx, out)
			return
		}
		groups[m] = append(groups[m], i)
	}
	var wg sync.WaitGroup
	for m, g := range groups {
		wg.Go(func() { r.pipeline(ctx, m, m.Options().Addr, calls, g, out) })
	}
	wg.Wait()
	var moved []int
	down := false
	for _, i := range idx {
		if err := out[i].err; err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
			moved = append(moved, i)
		}
		down = down || out[i].down
	}
	if down {
		// cc learns of a master that failed from its own calls, which
		// these were not: without this, a replica promoted in its place
		// would be found only at cc's next periodic reload (60 s by
		// default). The reload runs in the background, at most once
		// per cc's cool-down.
		cc.ReloadState(ctx)
	}
	if len(moved) > 0 {
		r.pipeline(ctx, cc, r.addr, calls, moved, out)
	}
}

// pipeline runs the calls idx of calls as EVALSHA in one pipeline of c,
// which is addr, and sets their results in out. A node that does not
// have a script yet (the first call there, a restart, SCRIPT FLUSH)
// answers NOSCRIPT, and the calls that failed so are retried once as
// EVAL, which sends the script's text, runs it and caches it in one
// step: a cache flushed a second time between a separate load and the
// retry cannot fail the call. NewRedis loads nothing: one more round
// trip on a node's first call costs less than a start-up that needs
// Redis.
func (r *Redis) pipeline(ctx context.Context, c interface{ Pipeline() redis.Pipeliner }, addr string, calls []scriptCall, idx []int, out []callResult) {
	pending := idx
	for attempt := 0; ; attempt++ {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(pending))
		for j, i := range pending {
			c := calls[i]
			if attempt == 0 {
				cmds[j] = c.script.EvalSha(ctx, once{pipe}, c.keys, c.args...)
			} else {
				cmds[j] = c.script.Eval(ctx, once{pipe}, c.keys, c.args...)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are per command, read below
		var retry []int
		for j, i := range pending {
			err := cmds[j].Err()
			out[i] = callResult{}
			switch {
			case err == nil && calls[i].batch > 0:
				out[i] = r.batchOf(addr, calls[i], cmds[j].Val())
			case err == nil:
				out[i].vals, out[i].err = r.int64s(calls[i], cmds[j].Val())
			case redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0:
				retry = append(retry, i)
			default:
				out[i] = r.failed(addr, calls[i].name(), err)
			}
		}
		if len(retry) == 0 {
			return
		}
		pending = retry
	}
}

// failed is the outcome of a call, named name, to addr that failed
// with err: an outage (see isUnreachable), the store's state, or a
// mistake in the call.
func (r *Redis) failed(addr, name string, err error) callResult {
	switch {
	case isUnreachable(err):
		return callResult{err: r.unreachable(addr, err), down: true}
	case redis.HasErrorPrefix(err, "CORRUPT ") || redis.HasErrorPrefix(err, "WRONGTYPE "):
		// A script found what no script wrote, or the key holds
		// another type: the store's state, not the request.
		return callResult{err: fmt.Errorf("%w: Redis %s, keys %s: %w", fleet.ErrCorrupt, addr, name, err)}
	default:
		return callResult{err: fmt.Errorf("%w: Redis %s, keys %s: %w", fleet.ErrInvalid, addr, name, err)}
	}
}

// name names c's keys, for errors: all of them, or a batch's first
// key's and how many more.
func (c scriptCall) name() string {
	if c.batch > 1 {
		return fmt.Sprintf("%q and %d more", c.keys[:2], len(c.keys)-2)
	}
	return fmt.Sprintf("%q", c.keys)
}

// batchOf reads batch call c's reply v from addr: a list of replies to
// its first keys, one to c.batch of them, each c.reply integers or an
// error of its own key's (see leaseBatch); items holds as many. The call
// is down if every key's reply says Redis takes no calls now.
func (r *Redis) batchOf(addr string, c scriptCall, v any) callResult {
	list, ok := v.([]any)
	if !ok || len(list) < 1 || len(list) > c.batch {
		err := fmt.Errorf("%w: Redis %s, keys %s: the script answered %T of %d replies; want 1 to %d", fleet.ErrCorrupt, addr, c.name(), v, len(list), c.batch)
		return callResult{err: err}
	}
	out := callResult{items: make([]callResult, len(list)), down: true}
	for k, x := range list {
		it := &out.items[k]
		if err, ok := x.(error); ok {
			*it = r.failed(addr, fmt.Sprintf("%q", c.keys[2*k:2*k+2]), err)
		} else {
			it.vals, it.err = r.int64s(scriptCall{keys: c.keys[2*k : 2*k+2], reply: c.reply}, x)
		}
		out.down = out.down && it.down
	}
	return out
}

// int64s reads c's reply v: a list of c.reply integers.
func (r *Redis) int64s(c scriptCall, v any) ([]int64, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: Redis %s, key %q: the script answered %s", fleet.ErrCorrupt, r.addr, c.keys[0], fmt.Sprintf(format, a...))
	}
	list, ok := v.([]any)
	if !ok {
		return nil, bad("a %T", v)
	}
	if len(list) != c.reply {
		return nil, bad("%d numbers; want %d", len(list), c.reply)
	}
	out := make([]int64, len(list))
	for i, x := range list {
		switch x := x.(type) {
		case int64:
			out[i] = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, bad("%q", x)
			}
			out[i] = n
		default:
			return nil, bad("a %T", x)
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
	var reply redis.Error
	if errors.As(err, &reply) {
		// Redis answered: only the reply's prefix says what it means.
		// Its text may quote a stored value (a script's CORRUPT error
		// does), so no word in it is taken for an outage.
		for _, p := range unwritable {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
		return strings.HasPrefix(reply.Error(), "ERR max number of clients reached")
	}
	msg := err.Error()
	return msg == "EOF" || strings.Contains(strings.ToLower(msg), "connection")
}

// unwritable are the prefixes of Redis's errors that mean it takes no
// writes now, whatever the key (see isUnreachable).
var unwritable = []string{"OOM ", "NOREPLICAS ", "MISCONF ", "READONLY ", "MASTERDOWN ", "LOADING ", "BUSY ",
	"CLUSTERDOWN ", "TRYAGAIN ", "MOVED ", "ASK ", "NOAUTH ", "WRONGPASS ", "NOPERM "}

// unreachable wraps err, which isUnreachable, as ErrUnreachable, naming
// the Redis, addr, and, for a deadline, what it means: go-redis retries a
// call until the deadline, and its last error is then the deadline's.
func (r *Redis) unreachable(addr string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		// The deadline is RedisConfig.Timeout's, or an earlier one of
		// the caller's (a hybrid Limiter's SyncTimeout).
		return fmt.Errorf("%w: Redis %s did not answer in time (RedisConfig.Timeout is %v, or the caller's deadline was sooner): %w", fleet.ErrUnreachable, addr, r.cfg.Timeout, err)
	}
	return fmt.Errorf("%w: Redis %s: %w", fleet.ErrUnreachable, addr, err)
}

// once is a pipeline whose script calls go-redis never sends twice. A
// pipeline whose connection breaks between the requests and the replies
// is retried whole by go-redis (up to the client's MaxRetries), scripts
// Redis already ran included, and a report that is not idempotent (a
// Usage with Series 0, or a Strict charge's increment) would be counted
// twice: TestLostReplyNotRetried measured 200 used for 100 reported. A
// command that says NoRetry keeps go-redis from retrying the pipeline
// that holds it; the call fails as unreachable instead, and its caller
// reports again, which a Series makes count once.
type once struct{ redis.Pipeliner }

func (p once) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return p.eval(ctx, "evalsha", sha, keys, args)
}

func (p once) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return p.eval(ctx, "eval", src, keys, args)
}

func (p once) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	_ = p.Process(ctx, noRetry{cmd}) // queued: Exec runs it, and cmd holds its reply
	return cmd
}

// noRetry is a command go-redis must not send again (see once).
type noRetry struct{ *redis.Cmd }

// NoRetry reports that the command is not to be retried.
func (noRetry) NoRetry() bool { return true }
