package main

import (
	"fmt"
	"strings"
)

// inFleet are the fleets of BenchmarkFleet, by benchmark id.
var inFleet = []library{
	{"HybridRedis", "hybridlimit Hybrid over Redis", ""},
	{"HybridGossip", "hybridlimit Hybrid over gossip", ""},
	{"GubernatorGlobal", "gubernator GLOBAL", "github.com/gubernator-io/gubernator/v2"},
	{"GubernatorBatching", "gubernator BATCHING", "github.com/gubernator-io/gubernator/v2"},
}

var fleetLoads = []struct{ id, name string }{
	{"uniform", "uniform"},
	{"skewed", "80/20"},
}

// fleetSection writes section 4: the fleet table and how it was run.
func fleetSection(w *strings.Builder, r *results) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("\n## 4. Fleet accuracy: four nodes at twice the limit\n\n")
	fleetTable(w, r)
	p(`
BenchmarkFleet runs four nodes in this process on one key limited to
1,000 a second, a token bucket with a burst of 1,000 (gubernator's
LEAKY_BUCKET with Burst 1,000, which leaks continuously as a token
bucket refills), offered 2,000 a second for 10 s: 500 on each node, or
1,600 on one and 400 over the other three. Every node first decides
20 requests a second for a second on another key, so that connections
are open and a hybrid node knows its fleet. hybridlimit syncs every
100 ms (its default), over one redis-server or over memberlist on
loopback; gubernator's daemons (started with its own SpawnDaemon on
free loopback ports, peers set statically) send GLOBAL hits every
100 ms, GlobalSyncWait's default, and batch BATCHING requests within
500 µs. Under the 80/20 load the busy node is never the key's
gubernator owner, as for 3 keys in 4. "The ideal" is a single token
bucket fed every arrival at its time (internal/testkit/fleettest);
"over" and "false rejection" compare them per aligned second; the
busiest second is sought from the third second on, after the burst, and
can run past the limit for the ideal too: when the callers pause (on 2
cores the daemons starve them at times) the bucket refills, and the next
second spends what it saved. "Over the ideal" is the column that says
whether a fleet admitted what a single limiter would not.
The latencies are the caller's: a function call for hybridlimit, a gRPC
call over loopback for gubernator.
`)
}

func fleetTable(w *strings.Builder, r *results) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("| Fleet | load | admitted, %% of the ideal | busiest 1 s, %% of the limit | over the ideal, %% | false rejection, %% | admitted/s | caller p50 | caller p99 | runs |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, load := range fleetLoads {
		for _, l := range inFleet {
			name := "Fleet/" + l.id + "/" + load.id
			if r.count(name) == 0 {
				continue
			}
			med := func(unit string) float64 { v, _ := r.median(name, unit); return v }
			p("| %s | %s | %.1f | %.1f | %.2f | %.2f | %s | %s | %s | %d |\n", l.name, load.name,
				med("util_%"), med("busiest_%"), med("over_%"), med("fr_%"), fmtNum(med("admitted/s")),
				fmtNs(1e3*med("p50_µs")), fmtNs(1e3*med("p99_µs")), r.count(name))
		}
	}
}

// fleetReading is what the fleet table says, read from it.
func fleetReading(r *results) []string {
	var s []string
	med := func(id, load, unit string) (float64, bool) { return r.median("Fleet/"+id+"/"+load, unit) }
	glob, ok1 := med("GubernatorGlobal", "uniform", "util_%")
	hy, ok2 := med("HybridRedis", "uniform", "util_%")
	if ok1 && ok2 {
		gs, _ := med("GubernatorGlobal", "skewed", "util_%")
		hs, _ := med("HybridRedis", "skewed", "util_%")
		gos, _ := med("HybridGossip", "uniform", "util_%")
		goss, _ := med("HybridGossip", "skewed", "util_%")
		s = append(s, fmt.Sprintf("At twice the limit, gubernator's GLOBAL behaviour admitted %.0f%% of what an ideal single limiter admits with the load spread evenly and %.0f%% with 80%% of it on one node: each node answers from its own copy of the bucket and sends its hits to the key's owner every GlobalSyncWait, so between two of the owner's broadcasts every node spends what the last broadcast said was left; hybridlimit admitted %.1f%% and %.1f%% over Redis, %.1f%% and %.1f%% over gossip, each node spending only the lease its fleet granted.", glob, gs, hy, hs, gos, goss))
	}
	if bf, ok := med("GubernatorBatching", "uniform", "fr_%"); ok {
		hf, _ := med("HybridRedis", "uniform", "fr_%")
		bp, _ := med("GubernatorBatching", "uniform", "p50_µs")
		hp, _ := med("HybridRedis", "uniform", "p50_µs")
		s = append(s, fmt.Sprintf("gubernator's BATCHING behaviour is the more exact: the key's owner decides every request, so it refused %.2f%% of what the ideal admits against hybridlimit's %.2f%% over Redis (hybrid's nodes refuse a little while a lease they spent waits for the next sync). It pays for that with a hop to the owner on each request, through gRPC: its callers waited %s at the median, against %s for a hybrid decision made in the caller's process. The two kinds of latency differ in kind (a gRPC call to a local daemon against a function call), and on 2 shared cores the four daemons, their callers and the Redis server compete for the CPU, which inflates gubernator's figures more than hybrid's.", bf, hf, fmtNs(1e3*bp), fmtNs(1e3*hp)))
	}
	return s
}

// rlsSection writes section 5: hybridlimitd's rate limit service beside
// the per-request approach, from cmd/hybridlimitd's BenchmarkRLS and
// BenchmarkRLSPerRequest, which run.sh runs in the same passes.
func rlsSection(w *strings.Builder, r *results) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("\n## 5. hybridlimitd beside envoyproxy/ratelimit's approach\n\n")
	var cases []string
	for _, name := range r.order {
		if c, ok := strings.CutPrefix(name, "RLS/"); ok {
			cases = append(cases, c)
		}
	}
	if len(cases) > 0 {
		p("| tenants | hybridlimitd decisions/s | per-request decisions/s | × per-request | p99 (ours / per-request) | Redis commands a decision (ours / per-request) | refused, %% (ours) | runs |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, c := range cases {
			med := func(name, unit string) float64 { v, _ := r.median(name, unit); return v }
			ours, theirs := "RLS/"+c, "RLSPerRequest/"+c
			p("| %s | %s | %s | %s | %s / %s | %s / %s | %s | %d |\n", strings.TrimPrefix(c, "tenants="),
				fmtNum(med(ours, "decisions/s")), fmtNum(med(theirs, "decisions/s")), fmtRatio(med(ours, "decisions/s")/med(theirs, "decisions/s")),
				fmtNs(1e6*med(ours, "p99-ms")), fmtNs(1e6*med(theirs, "p99-ms")),
				fmtNum(med(ours, "redis-cmds/op")), fmtNum(med(theirs, "redis-cmds/op")), fmtNum(med(ours, "refused-%")), r.count(ours))
		}
	}
	p(`
BenchmarkRLS and BenchmarkRLSPerRequest are in cmd/hybridlimitd (a
package main, which this module cannot import); run.sh builds them in
the root module and runs them in the same passes. A real gRPC client
calls one server on a real Redis from 64 goroutines over one connection,
a descriptor of one of 10 or 1,000 tenants a call, each far under its
limit. The per-request server is the same gRPC service deciding as
envoyproxy/ratelimit does, a Redis pipeline (INCRBY, EXPIRE on a fixed
window's counter) per call; envoyproxy/ratelimit's own binary is not run
here. Both are closed loops saturating the 2 cores, which the client,
the server and Redis share: the p99s are those of a saturated machine.
docs/server.md has the open-loop figures (a fixed offered rate).
`)
}
