package hybrid

import "context"

// A Tracer traces what a Limiter does on the network: each regular sync
// round that has keys to sync or charges to settle (not early syncs,
// nor Close's last round) and each Strict decision, never a Hybrid or
// Local decision (those are made in memory). Package tracing makes OpenTelemetry spans of them;
// the Limiter links no tracing library itself.
//
// Start is called when the operation begins, with the context it will
// make its calls to the fleet in (a Strict decision's is the caller's,
// through AllowNContext and WaitN; a sync round's is the sync loop's),
// and returns the context to make them in instead, and a func to call
// with the operation's outcome when it ends. op is "sync" or "strict";
// policy is the Strict key's policy ("" for a sync round; never the key,
// which may be a secret); n is the keys a sync round carries, or a
// Strict request's cost. Start and end may be called from any goroutine;
// they must not block.
type Tracer interface {
	Start(ctx context.Context, op, policy string, n int) (context.Context, func(error))
}

// endSpan calls end, a Tracer's, with err, if there is one.
func endSpan(end func(error), err error) {
	if end != nil {
		end(err)
	}
}
