// Command demo shows hybridlimit at work on this machine, with no Redis
// and nothing to set up:
//
//	go run ./cmd/demo [flags]
//
// For now it drives the local buckets: one client offers bursty traffic to
// a limiter of each algorithm at once, in real time, and a table shows
// what each admitted. Run with -h for the flags.
//
// The simulator runs a fleet on a virtual clock and tells how to tune it:
//
//	go run ./cmd/demo sim --scenario skewed --nodes 8 --sync 250ms
//	go run ./cmd/demo sim sweep --nodes 4,16 --shares demandweighted,equal --md t.md --svg t.svg
//	go run ./cmd/demo sim tune --overshoot 5 --false-rejection 2 --nodes 8 --rate 500
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "sim" {
		os.Exit(simMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	var cfg localDemo
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	fs.DurationVar(&cfg.duration, "duration", 4*time.Second, "how long to run")
	fs.Int64Var(&cfg.limit, "limit", 20, "requests each limiter admits per -window")
	fs.DurationVar(&cfg.window, "window", time.Second, "the limit's window")
	fs.IntVar(&cfg.burst, "burst", 30, "requests the client fires at the start of each -every")
	fs.DurationVar(&cfg.every, "every", 500*time.Millisecond, "how often the client bursts")
	fs.DurationVar(&cfg.tick, "tick", 500*time.Millisecond, "how often a row is printed")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./cmd/demo [flags]\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := cfg.run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
