// Package benchmarks compares hybridlimit with the rate limiters Go users
// would pick instead: golang.org/x/time/rate, sethvargo/go-limiter,
// throttled/throttled, ulule/limiter and go.uber.org/ratelimit in
// process, go-redis/redis_rate per decision in Redis, and gubernator's
// GLOBAL and BATCHING behaviours as a fleet (fleet_test.go).
//
// It is a module of its own, so that the peers' modules stay out of
// hybridlimit's go.mod, and it is not part of CI. The benchmarks are in
// its _test.go files; run.sh runs them all and writes docs/benchmarks.md
// through cmd/benchreport:
//
//	cd benchmarks && ./run.sh
//
// Every limiter is set to a limit no benchmark can reach (10^9 a second
// per key, with a burst as large), so that every decision is admitted and
// each benchmark times the same thing for every library: one admitted
// decision, its state updated. The admitted/op metric checks it.
package benchmarks
