package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// localDemo offers the same bursty traffic to one local limiter of each
// algorithm and prints what each lets through.
type localDemo struct {
	duration time.Duration
	limit    int64
	window   time.Duration
	burst    int
	every    time.Duration
	tick     time.Duration
}

var demoAlgorithms = []local.Algorithm{local.TokenBucket, local.SlidingWindow, local.FixedWindow, local.SlidingLog}

// localSummary is what a run of the local demo offered and admitted.
type localSummary struct {
	elapsed  time.Duration
	offered  int
	admitted []int // by algorithm, in demoAlgorithms order
}

func (d *localDemo) run(ctx context.Context, w io.Writer) (localSummary, error) {
	limiters := make([]*local.Limiter, len(demoAlgorithms))
	for i, alg := range demoAlgorithms {
		l, err := local.New(local.Config{Algorithm: alg, Limit: d.limit, Window: d.window})
		if err != nil {
			return localSummary{}, err
		}
		limiters[i] = l
	}
	fmt.Fprintf(w, "Each limiter: %d requests per %v. The client fires %d requests every %v (%.0f/s offered).\n\n",
		d.limit, d.window, d.burst, d.every, float64(d.burst)/d.every.Seconds())
	header := fmt.Sprintf("%8s %8s", "time", "offered")
	for _, alg := range demoAlgorithms {
		header += fmt.Sprintf(" %14s", alg)
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, strings.Repeat("-", len(header)))

	var offered, rowOffered int
	admitted := make([]int, len(limiters))
	rowAdmitted := make([]int, len(limiters))
	start := time.Now()
	burst := time.NewTicker(d.every)
	defer burst.Stop()
	tick := time.NewTicker(d.tick)
	defer tick.Stop()
	fire := func() error {
		for range d.burst {
			offered++
			rowOffered++
			for i, l := range limiters {
				r, err := l.Allow("client-1")
				if err != nil {
					return err
				}
				if r.Allowed() {
					admitted[i]++
					rowAdmitted[i]++
				}
			}
		}
		return nil
	}
	printRow := func() {
		row := fmt.Sprintf("%8s %8d", time.Since(start).Round(100*time.Millisecond), rowOffered)
		for i := range rowAdmitted {
			row += fmt.Sprintf(" %14d", rowAdmitted[i])
			rowAdmitted[i] = 0
		}
		rowOffered = 0
		fmt.Fprintln(w, row)
	}
	if err := fire(); err != nil {
		return localSummary{}, err
	}
	deadline := time.NewTimer(d.duration)
	defer deadline.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline.C:
			break loop
		case <-burst.C:
			if err := fire(); err != nil {
				return localSummary{}, err
			}
		case <-tick.C:
			printRow()
		}
	}
	if rowOffered > 0 {
		printRow()
	}
	elapsed := time.Since(start)
	fmt.Fprintf(w, "\nIn %v: offered %d; an ideal limiter admits at most %.0f (limit x windows, plus one window's burst).\n",
		elapsed.Round(time.Millisecond), offered, float64(d.limit)*(elapsed.Seconds()/d.window.Seconds()+1))
	for i, alg := range demoAlgorithms {
		fmt.Fprintf(w, "  %-14s admitted %5d  refused %5d\n", alg, admitted[i], offered-admitted[i])
	}
	return localSummary{elapsed: elapsed, offered: offered, admitted: admitted}, nil
}
