// Command demo shows hybridlimit at work on this machine, with no Redis
// and nothing to set up:
//
//	go run ./cmd/demo [flags]
//
// starts a fleet of nodes in this process, each a hybrid Limiter over real
// memberlist gossip on loopback, behind the httplimit middleware on its
// own HTTP port, and offers them load over HTTP: steady traffic with one
// hot tenant, one node cut off from the others a third of the way in and
// healed at two thirds. A table shows what each node admitted every
// second, and a summary the figures. Ctrl-C stops it early. Run with -h
// for the flags; -redis ADDR syncs through Redis, with gossip as the
// failover; -service runs every node as a hybridlimitd process instead,
// asked through its HTTP check endpoint.
//
//	go run ./cmd/demo local [flags]
//
// drives the local buckets instead: one client offers bursty traffic to a
// limiter of each algorithm at once, and a table shows what each admitted.
//
// The simulator runs a fleet on a virtual clock and tells how to tune it:
//
//	go run ./cmd/demo sim --scenario skewed --nodes 8 --sync 250ms
//	go run ./cmd/demo sim sweep --nodes 4,16 --shares demandweighted,equal --md t.md --svg t.svg
//	go run ./cmd/demo sim tune --overshoot 5 --false-rejection 2 --nodes 8 --rate 500
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	args := os.Args[1:]
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch cmd {
	case "sim":
		os.Exit(simMain(args, os.Stdout, os.Stderr))
	case "local":
		os.Exit(localMain(ctx, args))
	case "":
		os.Exit(fleetMain(ctx, args, os.Stdout, os.Stderr))
	default:
		fmt.Fprintf(os.Stderr, "demo: unknown command %q: want local, sim, or none for the fleet demo\n", cmd)
		os.Exit(2)
	}
}

// fleetMain runs the fleet demo; it returns the exit code.
func fleetMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	d := fleetDemo{tick: time.Second}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&d.nodes, "nodes", 5, "nodes in the fleet")
	fs.DurationVar(&d.sync, "sync", 100*time.Millisecond, "the sync interval")
	fs.DurationVar(&d.duration, "duration", 30*time.Second, "how long to run")
	fs.StringVar(&d.scenario, "scenario", "split", "split (one node cut off at 1/3, healed at 2/3), steady, or changes (a load factor of 0.5 at 1/3; back to 1 at 2/3, and the hot tenant upgraded to twice the limit)")
	fs.StringVar(&d.redis, "redis", "", "sync through the Redis at this address, with gossip as the failover")
	fs.BoolVar(&d.json, "json", false, "print the summary as JSON")
	fs.StringVar(&d.metrics, "metrics", "", "serve every node's Prometheus metrics at this address (host:port), at /metrics, while the demo runs")
	fs.BoolVar(&d.service, "service", false, "run every node as a hybridlimitd process, asked through its HTTP check endpoint (built with the go command unless -hybridlimitd is given); -scenario split then kills a node and starts it again")
	fs.StringVar(&d.server, "hybridlimitd", "", "with -service: the hybridlimitd binary to run")
	fs.Float64Var(&d.rate, "rate", 100, "requests per second offered to each node")
	fs.Int64Var(&d.limit, "limit", 100, "requests per second per tenant, fleet-wide")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/demo [flags]     (or: local [flags], sim [flags])\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	out := stdout
	if d.json {
		out = io.Discard // the table; the summary is the JSON
	}
	run := d.run
	if d.service {
		run = d.runService
	}
	sum, err := run(ctx, out)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	if err := sum.print(stdout, d.json); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

// localMain runs the local buckets demo; it returns the exit code.
func localMain(ctx context.Context, args []string) int {
	var cfg localDemo
	fs := flag.NewFlagSet("demo local", flag.ExitOnError)
	fs.DurationVar(&cfg.duration, "duration", 4*time.Second, "how long to run")
	fs.Int64Var(&cfg.limit, "limit", 20, "requests each limiter admits per -window")
	fs.DurationVar(&cfg.window, "window", time.Second, "the limit's window")
	fs.IntVar(&cfg.burst, "burst", 30, "requests the client fires at the start of each -every")
	fs.DurationVar(&cfg.every, "every", 500*time.Millisecond, "how often the client bursts")
	fs.DurationVar(&cfg.tick, "tick", 500*time.Millisecond, "how often a row is printed")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/demo local [flags]\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if _, err := cfg.run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	return 0
}
