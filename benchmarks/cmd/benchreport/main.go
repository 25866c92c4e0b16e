// Command benchreport turns run.sh's output ("# key: value" lines, then
// go test -bench output of several runs) into docs/benchmarks.md: a table
// per group, medians over the runs, a reading drawn from that output.
//
//	go run ./cmd/benchreport -in results.txt -out ../docs/benchmarks.md
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	in := flag.String("in", "results.txt", "run.sh's raw output")
	out := flag.String("out", "../docs/benchmarks.md", "the Markdown file to write")
	flag.Parse()
	f, err := os.Open(*in)
	if err != nil {
		log.Fatal(err)
	}
	r, err := parse(f)
	f.Close()
	if err != nil {
		log.Fatal(err)
	}
	var sb strings.Builder
	write(&sb, r, *in)
	if err := os.WriteFile(*out, []byte(sb.String()), 0o644); err != nil {
		log.Fatal(err)
	}
}

// results is what run.sh recorded.
type results struct {
	header  map[string]string   // "# key: value" lines
	modules map[string]string   // module path -> version, from "# module:" lines
	order   []string            // benchmark names, as first seen
	runs    map[string]*samples // by benchmark name, GOMAXPROCS suffix cut
}

// samples are one benchmark's values per unit, one per -count run.
type samples struct{ byUnit map[string][]float64 }

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(rd io.Reader) (*results, error) {
	r := &results{header: map[string]string{}, modules: map[string]string{}, runs: map[string]*samples{}}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), ": "); ok && strings.HasPrefix(line, "# ") {
			if k == "module" {
				path, version, _ := strings.Cut(v, " ")
				r.modules[path] = version
			} else {
				r.header[k] = v
			}
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 4 || len(fields)%2 != 0 {
			continue // a benchmark's name printed alone, before its logs
		}
		name := strings.TrimPrefix(procSuffix.ReplaceAllString(fields[0], ""), "Benchmark")
		s := r.runs[name]
		if s == nil {
			s = &samples{byUnit: map[string][]float64{}}
			r.runs[name] = s
			r.order = append(r.order, name)
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", line, err)
			}
			s.byUnit[fields[i+1]] = append(s.byUnit[fields[i+1]], v)
		}
	}
	return r, sc.Err()
}

// median of unit for benchmark name, and whether it was measured.
func (r *results) median(name, unit string) (float64, bool) {
	s := r.runs[name]
	if s == nil || len(s.byUnit[unit]) == 0 {
		return 0, false
	}
	v := slices.Clone(s.byUnit[unit])
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2], true
	}
	return (v[n/2-1] + v[n/2]) / 2, true
}

// spread is half the range of ns/op over the runs, as a share of the
// median: how far apart repeated runs of one benchmark landed.
func (r *results) spread(name string) float64 {
	s := r.runs[name]
	med, ok := r.median(name, "ns/op")
	if !ok || med == 0 {
		return 0
	}
	v := s.byUnit["ns/op"]
	return (slices.Max(v) - slices.Min(v)) / 2 / med
}

// ratio is a's ns/op over b's: the median of the ratios within each
// pass (run.sh runs every benchmark once a pass), so that a pass the
// shared machine slowed down as a whole does not skew it; the ratio of
// the medians if the two did not run equally often.
func (r *results) ratio(a, b string) float64 {
	ra, rb := r.runs[a], r.runs[b]
	if ra == nil || rb == nil {
		return math.NaN()
	}
	va, vb := ra.byUnit["ns/op"], rb.byUnit["ns/op"]
	if len(va) != len(vb) || len(va) == 0 {
		ma, _ := r.median(a, "ns/op")
		mb, _ := r.median(b, "ns/op")
		return ma / mb
	}
	q := make([]float64, len(va))
	for i := range va {
		q[i] = va[i] / vb[i]
	}
	slices.Sort(q)
	n := len(q)
	if n%2 == 1 {
		return q[n/2]
	}
	return (q[n/2-1] + q[n/2]) / 2
}

// count is how many runs name had.
func (r *results) count(name string) int {
	if s := r.runs[name]; s != nil {
		return len(s.byUnit["ns/op"])
	}
	return 0
}

// library describes one contender: its benchmark suffix, how the tables
// name it, and the module it comes from ("" for this checkout).
type library struct{ id, name, module string }

var inProcess = []library{
	{"Local", "hybridlimit `local.Limiter` (GCRA)", ""},
	{"HybridLocal", "hybridlimit `hybrid.Limiter`, Local policy", ""},
	{"XTimeRate", "`golang.org/x/time/rate`", "golang.org/x/time"},
	{"Sethvargo", "`sethvargo/go-limiter` memorystore", "github.com/sethvargo/go-limiter"},
	{"Throttled", "`throttled/v2` GCRA, memstore", "github.com/throttled/throttled/v2"},
	{"Ulule", "`ulule/limiter/v3` memory store", "github.com/ulule/limiter/v3"},
	{"Uber", "`go.uber.org/ratelimit` (paces, never refuses)", "go.uber.org/ratelimit"},
}

var inRedis = []library{
	{"RedisRate", "`go-redis/redis_rate/v10`", "github.com/go-redis/redis_rate/v10"},
	{"Strict", "hybridlimit Strict", ""},
	{"Hybrid", "hybridlimit Hybrid", ""},
}

func write(w *strings.Builder, r *results, in string) {
	h := r.header
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# Benchmarks: hybridlimit beside the libraries you would pick instead\n\n")
	p("Written by `benchmarks/run.sh` from one run; every figure below comes from that run's output, kept in `benchmarks/%s`. Rerun the script to refresh it, rather than editing this file.\n\n", in)
	p("- Date: %s\n", h["date"])
	p("- Machine: %s; `nproc` %s; CPU %s\n", h["go"], h["nproc"], h["cpu"])
	p("- hybridlimit: this checkout, %s\n", h["hybridlimit"])
	p("- Command: `%s`\n", h["command"])
	p("- Each benchmark ran %s times (`-count`, one pass over all of them at a time), for `%s` each; tables show medians, ± is half the range of ns/op over the runs, and ratios are the median of the ratios within each pass.\n\n", h["count"], h["benchtime"])
	p("Peers, at the newest versions the Go module proxy offers:\n\n")
	seen := map[string]bool{}
	for _, l := range slices.Concat(inProcess, inRedis, inFleet) {
		if l.module != "" && !seen[l.module] {
			seen[l.module] = true
			p("- `%s` %s\n", l.module, r.modules[l.module])
		}
	}
	p("- `github.com/redis/go-redis/v9` %s (the client under redis_rate and hybridlimit's Redis syncer)\n", r.modules["github.com/redis/go-redis/v9"])
	if x := h["excluded"]; x != "" {
		p("\nLeft out: %s\n", x)
	}
	p(`
Every limiter is set to a limit no benchmark reaches, so each benchmark
times one admitted decision with its state updated, for every library
(the admitted/op metric in the raw output is 1 throughout unless a
table says otherwise). Refusals, eviction and accuracy are not measured
in sections 1-3; section 4 measures a fleet's accuracy. In process the limit is 10^9 a second per key (sethvargo's
memorystore gets 10^12 per 1,000 s: per 1 s its bucket would refill
one token a tick after the first, its fill rate being Interval/Tokens);
redis_rate and the Strict policy get 10^6 a second, out of reach of
round trips, because redis_rate's floating-point GCRA rounds a 10^-9 s
emission interval away and then skips its SET. Each decision goes
through one indirect call, the same for every library. "parallel" runs
GOMAXPROCS goroutines (b.RunParallel); the ratio columns divide by
x/time/rate's ns/op in the same mode, so below 1 is faster than
x/time/rate.
`)

	p("\n## 1. One key, in process\n\n")
	inProcessTable(w, r, "OneKey")
	p(`
x/time/rate here is one bare rate.Limiter and go.uber.org/ratelimit one
bare Limiter: neither looks a key up, which every other library does.
go.uber.org/ratelimit blocks until a request's slot comes instead of
refusing it; at this rate it never sleeps, so its row is the cost of its
bookkeeping. It is left out of the many-key table: it has no keys, and
keyed use would be x/time/rate's sync.Map around a blocking call.
`)
	p("\n## 2. 100,000 keys drawn Zipf(1.1), in process\n\n")
	inProcessTable(w, r, "Zipf")
	p(`
Keys are "user:0" to "user:99999", drawn with math/rand/v2's Zipf
(s=1.1, v=1, fixed seed) into a sequence of 2^20 precomputed strings;
every key is offered once before timing, so every limiter holds all
100,000. x/time/rate is a sync.Map of *rate.Limiter (Load, then
LoadOrStore on a miss). throttled's memstore is bounded at 2^20 keys (an
LRU, as its README sets one up), the bound hybridlimit's local.Limiter
has by default.
`)
	p("\n## 3. Per-decision Redis\n\n")
	redisTable(w, r)
	p(`
One redis-server (started by the benchmark on a free loopback port, no
persistence) on the same 2 cores as the benchmark. 1,000 keys are offered
in turn. "g" is the number of goroutines (b.SetParallelism). Redis
cmds/op is the total of calls in INFO commandstats (INFO itself left
out) before and after the timed loop, over the decisions made:
commands run inside scripts count. Round trips/op counts the client's
calls, a pipeline as one (a go-redis hook). Redis CPU/op is the CPU
Redis used (INFO cpu, user and system) over the decisions made; p50 and
p99 time every 64th decision, the last 4,096 of each goroutine (with 32
goroutines on 2 cores, a call's time includes its wait for a core).
Every client has 64 connections. Hybrid decides in memory from a lease and syncs every
100 ms in the background, so its commands are a cost per interval, not
per decision: its cmds/op falls as the decision rate rises, and
Redis cmds/s is the figure to compare.
`)
	fleetSection(w, r)
	rlsSection(w, r)
	p("\n## Reading\n\n")
	reading(w, r)
}

func inProcessTable(w *strings.Builder, r *results, group string) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("| Library | serial ns/op | allocs/op | × x/time/rate | parallel ns/op | allocs/op | × x/time/rate |\n")
	p("|---|---:|---:|---:|---:|---:|---:|\n")
	var notes []string
	for _, l := range inProcess {
		if r.count(group+"_"+l.id+"/serial") == 0 {
			continue
		}
		p("| %s", l.name)
		for _, mode := range []string{"serial", "parallel"} {
			name := group + "_" + l.id + "/" + mode
			ns, _ := r.median(name, "ns/op")
			allocs, _ := r.median(name, "allocs/op")
			p(" | %s ±%.0f%% | %s | %.2f", fmtNs(ns), 100*r.spread(name), fmtNum(allocs), r.ratio(name, group+"_XTimeRate/"+mode))
			if f, _ := r.median(name, "failed/op"); f > 0 {
				notes = append(notes, fmt.Sprintf("%s, %s: %.2g of decisions failed with an error (median over runs).", l.name, mode, f))
			}
			if a, ok := r.median(name, "admitted/op"); ok && a < 1 {
				notes = append(notes, fmt.Sprintf("%s, %s: %.4g of decisions admitted.", l.name, mode, a))
			}
		}
		p(" |\n")
	}
	for _, n := range notes {
		p("\n%s\n", n)
	}
}

func redisTable(w *strings.Builder, r *results) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("| Library | keys | g | ns/op | decisions/s | p50 | p99 | allocs/op | Redis cmds/op | Redis CPU/op | round trips/op | Redis cmds/s | × redis_rate decisions/s |\n")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var notes []string
	for _, c := range redisCases(r) {
		for _, l := range inRedis {
			name := "Redis_" + l.id + "/" + c
			if r.count(name) == 0 {
				continue
			}
			keys, g := splitCase(c)
			ns, _ := r.median(name, "ns/op")
			allocs, _ := r.median(name, "allocs/op")
			cmds, _ := r.median(name, "cmds/op")
			rtt, _ := r.median(name, "rtt/op")
			p50, _ := r.median(name, "p50-ns")
			p99, _ := r.median(name, "p99-ns")
			cpu, _ := r.median(name, "redis-cpu-ns/op")
			p("| %s | %s | %s | %s ±%.0f%% | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				l.name, keys, g, fmtNs(ns), 100*r.spread(name), fmtNum(1e9/ns), fmtNs(p50), fmtNs(p99), fmtNum(allocs),
				fmtNum(cmds), fmtNs(cpu), fmtNum(rtt), fmtNum(cmds*1e9/ns), fmtRatio(r.ratio("Redis_RedisRate/"+c, name)))
			if f, _ := r.median(name, "failed/op"); f > 0 {
				notes = append(notes, fmt.Sprintf("%s, %s: %.2g of decisions failed with an error.", l.name, c, f))
			}
		}
	}
	for _, n := range notes {
		p("\n%s\n", n)
	}
}

// redisCases lists the Redis sub-benchmarks ("keys=1/g=1"...) in order.
func redisCases(r *results) []string {
	var cases []string
	for _, name := range r.order {
		if rest, ok := strings.CutPrefix(name, "Redis_RedisRate/"); ok && !slices.Contains(cases, rest) {
			cases = append(cases, rest)
		}
	}
	return cases
}

func splitCase(c string) (keys, g string) {
	k, gg, _ := strings.Cut(c, "/")
	return strings.TrimPrefix(k, "keys="), strings.TrimPrefix(gg, "g=")
}

// reading writes the prose under the tables. Which library wins, and by
// how much, is read from the results; only the reasons are fixed text,
// facts about each library's code.
func reading(w *strings.Builder, r *results) {
	var s []string
	add := func(format string, a ...any) { s = append(s, fmt.Sprintf(format, a...)) }
	med := func(name, unit string) float64 { v, _ := r.median(name, unit); return v }

	worst, worstRedis := 0.0, 0.0
	for _, name := range r.order {
		if strings.HasPrefix(name, "Fleet/") {
			continue // ns/op is the run's length
		}
		if strings.HasPrefix(name, "Redis_") {
			worstRedis = max(worstRedis, r.spread(name))
		} else {
			worst = max(worst, r.spread(name))
		}
	}
	add("This ran on a shared %s-core machine, which is noisy: repeated runs of one benchmark landed up to ±%.0f%% apart in process and ±%.0f%% against Redis, so the ratios, taken within each pass, say more than the absolute nanoseconds, and differences of a few tens of percent are not findings.", r.header["nproc"], 100*worst, 100*worstRedis)

	for _, g := range []struct{ group, what string }{{"OneKey", "On one key"}, {"Zipf", "Over 100,000 Zipf keys"}} {
		if r.count(g.group+"_Local/serial") == 0 || r.count(g.group+"_XTimeRate/serial") == 0 {
			continue
		}
		sentence := fmt.Sprintf("%s, local.Limiter took %s a decision serially and %s in parallel, %.2f× and %.2f× the time x/time/rate took",
			g.what, fmtNs(med(g.group+"_Local/serial", "ns/op")), fmtNs(med(g.group+"_Local/parallel", "ns/op")),
			r.ratio(g.group+"_Local/serial", g.group+"_XTimeRate/serial"),
			r.ratio(g.group+"_Local/parallel", g.group+"_XTimeRate/parallel"))
		var faster []string
		for _, l := range inProcess {
			if l.module == "" {
				continue
			}
			var modes []string
			for _, mode := range []string{"serial", "parallel"} {
				ns, ok := r.median(g.group+"_"+l.id+"/"+mode, "ns/op")
				if ok && ns < med(g.group+"_Local/"+mode, "ns/op") {
					modes = append(modes, fmt.Sprintf("%s %s", fmtNs(ns), mode))
				}
			}
			if len(modes) > 0 {
				faster = append(faster, fmt.Sprintf("%s was faster (%s)%s", l.name, strings.Join(modes, ", "), why(l.id, g.group)))
			}
		}
		if len(faster) == 0 {
			sentence += "; no peer was faster."
		} else {
			sentence += "; " + strings.Join(faster, "; ") + "."
		}
		s = append(s, sentence)
	}
	var allocating []string
	for _, l := range inProcess {
		if a, ok := r.median("Zipf_"+l.id+"/serial", "allocs/op"); ok && a > 0 {
			allocating = append(allocating, fmt.Sprintf("%s (%s allocs/op)", l.name, fmtNum(a)))
		}
	}
	if len(allocating) > 0 {
		add("In process only %s allocated per decision%s; the others allocate nothing once a key exists.", strings.Join(allocating, ", "), allocReason(allocating))
	}
	for _, mode := range []string{"parallel", "serial"} {
		if f := med("OneKey_Throttled/"+mode, "failed/op"); f > 0 {
			add("throttled returned an error for %.2g of decisions on one key in %s: its GCRA gives up after 10 lost compare-and-swaps, and these benchmarks count that as a failure rather than retry.", f, mode)
			break
		}
	}

	cases := redisCases(r)
	var ratios []float64
	for _, c := range cases {
		if r.count("Redis_RedisRate/"+c) > 0 && r.count("Redis_Strict/"+c) > 0 {
			ratios = append(ratios, r.ratio("Redis_RedisRate/"+c, "Redis_Strict/"+c))
		}
	}
	if len(ratios) > 0 {
		slower := 0
		for _, x := range ratios {
			if x < 1 {
				slower++
			}
		}
		c := cases[0]
		sc, rc := med("Redis_Strict/"+c, "cmds/op"), med("Redis_RedisRate/"+c, "cmds/op")
		cmds := fmt.Sprintf("both run %s Redis commands a decision", fmtNum(rc))
		if sc > rc+0.05 {
			cmds = fmt.Sprintf("Strict runs %s Redis commands to redis_rate's %s", fmtNum(sc), fmtNum(rc))
		}
		add("Deciding every request in Redis, hybridlimit Strict made %.2f-%.2f× redis_rate's decisions/s over the %d cases and was slower in %d of them: both make one script call (one round trip) a decision and %s, but Strict allocates %s times to its %s, so when every decision must go to Redis, redis_rate is the leaner client.",
			slices.Min(ratios), slices.Max(ratios), len(ratios), slower, cmds,
			fmtNum(med("Redis_Strict/"+c, "allocs/op")), fmtNum(med("Redis_RedisRate/"+c, "allocs/op")))
	}
	const many = "keys=1000/g=32"
	if hy := med("Redis_Hybrid/"+many, "ns/op"); hy > 0 {
		add("Hybrid mode decided in memory, at %s a decision over 1,000 keys from 32 goroutines (%s× redis_rate's decisions/s) with %s Redis commands a decision against redis_rate's %s; what it gives up is per-request exactness: a node spends a lease the fleet granted at its last sync, so the fleet's busiest window runs a few percent past an ideal single limiter's (2.8%% in the simulator's steady case at 8 nodes, docs/tuning.md) and some requests an ideal limiter admits are refused (about 1%% there), where redis_rate and Strict are exact.",
			fmtNs(hy), fmtNum(r.ratio("Redis_RedisRate/"+many, "Redis_Hybrid/"+many)), fmtNum(med("Redis_Hybrid/"+many, "cmds/op")), fmtNum(med("Redis_RedisRate/"+many, "cmds/op")))
	}
	const manySerial = "keys=1000/g=1"
	if hy := med("Redis_Hybrid/"+manySerial, "ns/op"); hy > 0 {
		perSec := med("Redis_Hybrid/"+manySerial, "cmds/op") * 1e9 / hy
		rc := med("Redis_RedisRate/"+manySerial, "cmds/op")
		add("Its Redis load follows the active keys and the interval, not the traffic: with 1,000 keys and one goroutine the sync loop ran %s Redis commands a second (in %s round trips), as many as redis_rate runs at %s decisions a second, so below about %s decisions a second per key redis_rate runs fewer Redis commands.",
			fmtNum(perSec), fmtNum(med("Redis_Hybrid/"+manySerial, "rtt/op")*1e9/hy), fmtNum(perSec/rc), fmtNum(perSec/rc/1000))
	}
	for _, k := range []string{"1000", "1"} {
		one, par := "keys="+k+"/g=1", "keys="+k+"/g=32"
		a, b := med("Redis_Hybrid/"+one, "ns/op"), med("Redis_Hybrid/"+par, "ns/op")
		if a == 0 || b == 0 {
			continue
		}
		ra, rb := med("Redis_Hybrid/"+one, "rtt/op")*1e9/a, med("Redis_Hybrid/"+par, "rtt/op")*1e9/b
		if rb < 0.75*ra {
			add("With 32 goroutines spinning on 2 cores the sync loop made %s round trips a second against %s with one goroutine (%s keys): it was starved of CPU, as a benchmark starves it and a saturated server may, so Hybrid's cmds/op there understate a calmer node's.", fmtNum(rb), fmtNum(ra), k)
			break
		}
	}
	s = append(s, fleetReading(r)...)
	add("The libraries do not limit alike (ulule counts per fixed window, sethvargo refills per tick, the others run GCRA or a token bucket), so these figures compare the cost of a decision, not its quality.")
	w.WriteString(strings.Join(s, " "))
	w.WriteString("\n")
}

// why is the reason a peer can beat local.Limiter: a fact about its code.
func why(id, group string) string {
	switch {
	case id == "Uber":
		return ": one atomic word, no key to look up, and it paces rather than decides"
	case id == "XTimeRate" && group == "OneKey":
		return ": one bare limiter behind a mutex, with no key to look up"
	case id == "XTimeRate":
		return ": a sync.Map lookup and a mutex per key"
	case id == "Sethvargo":
		return ": a map under a read lock, a per-key mutex and a cheap wall clock (fasttime)"
	case id == "Throttled":
		return ": GCRA on one atomic word per key"
	}
	return ""
}

func allocReason(allocating []string) string {
	if len(allocating) == 1 && strings.Contains(allocating[0], "ulule") {
		return " (it builds its store key, prefix + key, anew on every call)"
	}
	return ""
}
