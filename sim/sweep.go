package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hybridlimit/hybridlimit/fleet"
)

// defaultIntervals are the sync intervals Sweep and Tune try by default.
var defaultIntervals = []time.Duration{
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
}

// SweepConfig is a grid of runs: every interval, for every backend, node
// count and share strategy, with Base's other settings.
type SweepConfig struct {
	Base      Config
	Intervals []time.Duration // default 10ms, 25ms, 50ms, 100ms, 250ms, 500ms, 1s, 2s
	Nodes     []int           // default Base.Nodes
	Shares    []fleet.Shares  // default Base.Shares
	Backends  []string        // default Base.Backend
}

// Sweep runs the grid, in order: backends, shares, nodes, intervals.
func Sweep(c SweepConfig) ([]*Result, error) {
	if len(c.Intervals) == 0 {
		c.Intervals = defaultIntervals
	}
	if len(c.Nodes) == 0 {
		c.Nodes = []int{c.Base.Nodes}
	}
	if len(c.Shares) == 0 {
		c.Shares = []fleet.Shares{c.Base.Shares}
	}
	if len(c.Backends) == 0 {
		c.Backends = []string{c.Base.Backend}
	}
	var out []*Result
	for _, b := range c.Backends {
		for _, sh := range c.Shares {
			for _, n := range c.Nodes {
				for _, iv := range c.Intervals {
					cfg := c.Base
					cfg.Backend, cfg.Shares, cfg.Nodes, cfg.Interval = b, sh, n, iv
					r, err := Run(cfg)
					if err != nil {
						return nil, err
					}
					out = append(out, r)
				}
			}
		}
	}
	return out, nil
}

// WriteMarkdown writes results as a markdown table.
func WriteMarkdown(w io.Writer, results []*Result) error {
	var b strings.Builder
	b.WriteString("| scenario | backend | nodes | shares | interval | overshoot (worst window, % of limit) | overshoot (% of ideal) | false rejection (%) | under-limit refusals (% of requests) | sync ops/s | bytes/s |\n")
	b.WriteString("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %v | %.2f | %.2f | %.2f | %.3f | %.0f | %.0f |\n",
			r.Scenario, r.Backend, r.Nodes, r.Shares, time.Duration(r.Interval), r.OvershootWorst, r.Overshoot, r.FalseRejection, r.UnderLimit, r.SyncOps, r.SyncBytes)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Recommendation is Tune's answer: the run at the longest interval that
// met the targets (its Interval is the advice), and every run tried.
type Recommendation struct {
	Result *Result   `json:"result"`
	Tried  []*Result `json:"tried"`
}

// Tune finds the longest sync interval at which load meets both targets:
// the worst window's overshoot at most maxOvershoot percent of the limit,
// and false rejection at most maxFalseRejection percent of the ideal's
// admissions. Longer intervals mean fewer store operations; it tries
// every interval in intervals (default SweepConfig's). It fails, with
// every figure, when none meets them.
func Tune(load Config, maxOvershoot, maxFalseRejection float64, intervals []time.Duration) (*Recommendation, error) {
	if len(intervals) == 0 {
		intervals = defaultIntervals
	}
	intervals = slices.Clone(intervals)
	slices.Sort(intervals)
	rec := &Recommendation{}
	for _, iv := range intervals {
		cfg := load
		cfg.Interval = iv
		r, err := Run(cfg)
		if err != nil {
			return nil, err
		}
		rec.Tried = append(rec.Tried, r)
		if r.OvershootWorst <= maxOvershoot && r.FalseRejection <= maxFalseRejection {
			rec.Result = r
		}
	}
	if rec.Result == nil {
		var b strings.Builder
		_ = WriteMarkdown(&b, rec.Tried)
		return rec, fmt.Errorf("sim: no interval meets overshoot <= %.2f%% and false rejection <= %.2f%%:\n%s", maxOvershoot, maxFalseRejection, b.String())
	}
	return rec, nil
}

// WriteSVG plots overshoot (worst window) and false rejection against the
// sync interval, one line per node count and share strategy, on a
// logarithmic interval axis.
func WriteSVG(w io.Writer, results []*Result) error {
	const (
		width, height     = 760, 420
		left, right       = 70, 200
		top, bottom       = 40, 60
		plotW, plotH      = width - left - right, height - top - bottom
		strokeOvershoot   = ""
		strokeFalseReject = "6 4"
	)
	type series struct {
		name   string
		points []*Result
	}
	var all []series
	for _, r := range results {
		name := fmt.Sprintf("%s, %d nodes, %s", r.Backend, r.Nodes, r.Shares)
		if len(all) == 0 || all[len(all)-1].name != name {
			all = append(all, series{name: name})
		}
		all[len(all)-1].points = append(all[len(all)-1].points, r)
	}
	minI, maxI, maxY := math.Inf(1), math.Inf(-1), 1.0
	for _, r := range results {
		iv := float64(r.Interval)
		minI, maxI = math.Min(minI, iv), math.Max(maxI, iv)
		maxY = math.Max(maxY, math.Max(r.OvershootWorst, r.FalseRejection))
	}
	maxY = math.Ceil(maxY/5) * 5
	if maxI <= minI {
		maxI = minI * 10
	}
	x := func(iv Duration) float64 {
		return left + plotW*(math.Log(float64(iv))-math.Log(minI))/(math.Log(maxI)-math.Log(minI))
	}
	y := func(v float64) float64 { return top + plotH*(1-v/maxY) }
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	title := "overshoot (solid) and false rejection (dashed) against the sync interval"
	if len(results) > 0 {
		title = fmt.Sprintf("%s, %s: %s", results[0].Scenario, results[0].Algorithm, title)
	}
	fmt.Fprintf(&b, `<text x="%d" y="20">%s</text>`+"\n", left, title)
	// Axes, grid and ticks.
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, top+plotH)
	for _, r := range all[0:min(1, len(all))] {
		for _, p := range r.points {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%v</text>`+"\n", x(p.Interval), top+plotH+18, time.Duration(p.Interval))
		}
	}
	for v := 0.0; v <= maxY; v += maxY / 5 {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), left+plotW, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g%%</text>`+"\n", left-6, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">sync interval</text>`+"\n", left+plotW/2, height-15)
	for i, s := range all {
		c := colors[i%len(colors)]
		for _, line := range []struct {
			dash string
			v    func(*Result) float64
		}{
			{strokeOvershoot, func(r *Result) float64 { return r.OvershootWorst }},
			{strokeFalseReject, func(r *Result) float64 { return r.FalseRejection }},
		} {
			var pts []string
			for _, p := range s.points {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.Interval), y(line.v(p))))
			}
			dash := ""
			if line.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, line.dash)
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", c, dash, strings.Join(pts, " "))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", left+plotW+15, top+10+18*i, left+plotW+35, top+10+18*i, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+plotW+40, top+14+18*i, s.name)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
