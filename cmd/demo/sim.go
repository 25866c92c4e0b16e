package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/local"
	"github.com/hybridlimit/hybridlimit/sim"
)

const simUsage = `usage:
  go run ./cmd/demo sim [flags]          simulate one run and print its figures
  go run ./cmd/demo sim sweep [flags]    every sync interval x node count x shares: a table and a plot
  go run ./cmd/demo sim tune [flags]     the longest sync interval that meets your targets

`

// simMain runs the simulator's command line; it returns the exit code.
func simMain(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("demo sim "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg       sim.Config
		shares    = fs.String("shares", "demandweighted", "demandweighted or equal (sweep: a comma-separated list)")
		nodesList = fs.String("nodes", "4", "nodes in the fleet (sweep: a comma-separated list)")
		backends  = fs.String("backend", "redis", "redis or gossip (sweep: a comma-separated list)")
		jsonOut   = fs.Bool("json", false, "print JSON instead of a table")
		intervals = fs.String("intervals", "", "sweep and tune: comma-separated sync intervals (default 10ms to 2s)")
		md        = fs.String("md", "", "sweep: also write the markdown table to this file")
		svg       = fs.String("svg", "", "sweep: also write the plot to this SVG file")
		over      = fs.Float64("overshoot", 5, "tune: the worst window's acceptable overshoot, in percent of the limit")
		falseRej  = fs.Float64("false-rejection", 2, "tune: acceptable false rejection, in percent of what an ideal limiter admits")
	)
	def := sim.DefaultConfig()
	fs.TextVar(&cfg.Algorithm, "algorithm", local.TokenBucket, "tokenbucket (gcra) or slidingwindow")
	fs.StringVar(&cfg.Scenario, "scenario", def.Scenario, "the load: "+strings.Join(sim.Scenarios, ", "))
	fs.DurationVar(&cfg.Interval, "sync", def.Interval, "the sync interval")
	fs.Float64Var(&cfg.Rate, "rate", def.Rate, "requests per second offered to each node")
	fs.Int64Var(&cfg.Limit, "limit", 0, "the fleet-wide limit per -window, per key (default: half the offered load)")
	fs.DurationVar(&cfg.Window, "window", def.Window, "the limit's window")
	fs.DurationVar(&cfg.RTT, "rtt", def.RTT, "round trip to the store (gossip: twice a message's delay)")
	fs.Float64Var(&cfg.GossipLoss, "loss", 0, "gossip: the chance a message is lost")
	fs.IntVar(&cfg.GossipFanout, "fanout", def.GossipFanout, "gossip: peers a node sends to per round")
	fs.DurationVar(&cfg.Duration, "duration", def.Duration, "simulated time")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed for the arrivals and jitter")
	fs.IntVar(&cfg.Keys, "keys", 0, "keys the zipf and hotkey scenarios spread their load over (0: 1,000 and 100)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), simUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "demo sim:", err)
		return 1
	}
	if cfg.Algorithm != local.TokenBucket && cfg.Algorithm != local.SlidingWindow {
		return fail(fmt.Errorf("-algorithm %v: the simulator has tokenbucket and slidingwindow", cfg.Algorithm))
	}
	shareList, err := parseShares(*shares)
	if err != nil {
		return fail(err)
	}
	nodes, err := parseInts(*nodesList)
	if err != nil {
		return fail(fmt.Errorf("-nodes: %w", err))
	}
	ivs, err := parseDurations(*intervals)
	if err != nil {
		return fail(fmt.Errorf("-intervals: %w", err))
	}
	backendList := strings.Split(*backends, ",")
	cfg.Nodes, cfg.Shares, cfg.Backend = nodes[0], shareList[0], backendList[0]

	switch cmd {
	case "run":
		r, err := sim.Run(cfg)
		if err != nil {
			return fail(err)
		}
		if *jsonOut {
			err = sim.WriteJSON(stdout, r)
		} else {
			err = r.WriteTable(stdout)
		}
		if err != nil {
			return fail(err)
		}
	case "sweep":
		rs, err := sim.Sweep(sim.SweepConfig{Base: cfg, Intervals: ivs, Nodes: nodes, Shares: shareList, Backends: backendList})
		if err != nil {
			return fail(err)
		}
		if *jsonOut {
			err = sim.WriteJSON(stdout, rs)
		} else {
			err = sim.WriteMarkdown(stdout, rs)
		}
		if err == nil && *md != "" {
			err = writeFile(*md, func(w io.Writer) error { return sim.WriteMarkdown(w, rs) })
		}
		if err == nil && *svg != "" {
			err = writeFile(*svg, func(w io.Writer) error { return sim.WriteSVG(w, rs) })
		}
		if err != nil {
			return fail(err)
		}
	case "tune":
		rec, err := sim.Tune(cfg, *over, *falseRej, ivs)
		if err != nil {
			return fail(err)
		}
		if *jsonOut {
			if err := sim.WriteJSON(stdout, rec); err != nil {
				return fail(err)
			}
			return 0
		}
		fmt.Fprintf(stdout, "Sync every %v: the longest interval with overshoot <= %g%% of the limit and false rejection <= %g%% for %s load on %d nodes at %g req/s each, over %s.\n\n",
			time.Duration(rec.Result.Interval), *over, *falseRej, cfg.Scenario, cfg.Nodes, cfg.Rate, cfg.Backend)
		if err := sim.WriteMarkdown(stdout, rec.Tried); err != nil {
			return fail(err)
		}
	default:
		fmt.Fprintf(stderr, "demo sim: unknown command %q\n\n%s", cmd, simUsage)
		return 2
	}
	return 0
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func parseShares(s string) ([]fleet.Shares, error) {
	var out []fleet.Shares
	for _, f := range strings.Split(s, ",") {
		var sh fleet.Shares
		if err := sh.UnmarshalText([]byte(f)); err != nil {
			return nil, fmt.Errorf("-shares: %w", err)
		}
		out = append(out, sh)
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil {
			return nil, fmt.Errorf("%q is not a number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	if s == "" {
		return nil, nil
	}
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}
