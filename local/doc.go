// Package local rate-limits keys within one process, with no network.
//
// A Limiter holds one bucket per key, of one of four algorithms: a token
// bucket kept as GCRA (the default), a sliding window counter, a fixed
// window, or an exact sliding log. Deciding for an existing key takes no
// lock and allocates nothing: the token bucket's whole state is one atomic
// int64 updated by compare-and-swap.
//
// Buckets can be resized while requests flow (SetLimit), which is how the
// hybrid package sizes each key to this node's share of a fleet-wide quota.
// Reserve and Wait shape traffic instead of refusing it.
//
// See docs/local.md for the trade-offs between the algorithms, with
// measured figures.
package local
