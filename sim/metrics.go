package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/hybridlimit/hybridlimit/local"
)

// Duration is a time.Duration that reads as "100ms" in JSON.
type Duration time.Duration

// MarshalText formats d as time.Duration's String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses what MarshalText wrote.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Result is what a run measured, against an ideal single limiter that saw
// every request of the fleet.
type Result struct {
	Scenario  string   `json:"scenario"`
	Backend   string   `json:"backend"`
	Nodes     int      `json:"nodes"`
	Interval  Duration `json:"interval"`
	Shares    string   `json:"shares"`
	Algorithm string   `json:"algorithm"`
	Limit     int64    `json:"limit"`
	Window    Duration `json:"window"`
	RTT       Duration `json:"rtt"`
	Duration  Duration `json:"duration"`
	Seed      uint64   `json:"seed"`

	Offered  int64 `json:"offered"`
	Admitted int64 `json:"admitted"`
	Ideal    int64 `json:"ideal"`

	// OvershootWorst is the worst window's admissions beyond the ideal's,
	// in percent of the limit, over every key and aligned window.
	OvershootWorst float64 `json:"overshoot_worst_pct"`
	// Overshoot is the admissions beyond the ideal's in all windows, in
	// percent of the ideal's admissions.
	Overshoot float64 `json:"overshoot_pct"`
	// FalseRejection is the ideal's admissions the fleet refused, window
	// by window, in percent of the ideal's admissions.
	FalseRejection float64 `json:"false_rejection_pct"`
	// UnderLimit is the requests the fleet refused while the ideal had at
	// least half its burst left (for a window algorithm, half its Limit
	// unspent) just before deciding the same request, in percent of all
	// requests offered: the refusals a client well within its quota
	// sees, which should be none.
	UnderLimit float64 `json:"under_limit_refusal_pct"`

	// SyncOps is sync operations per second, one per key per sync: what
	// Redis executes, or what the gossip nodes compute locally.
	SyncOps float64 `json:"sync_ops_per_s"`
	// SyncBytes is the bytes per second the fleet's network carries: an
	// estimate of the Redis requests, or every gossip message sent.
	SyncBytes float64 `json:"sync_bytes_per_s"`

	// Coverage, over gossip, is the share of (peer, update) pairs in
	// which the peer heard a node's update of a key, or a newer one,
	// within 300 ms of the sync that made it, in percent: how far gossip
	// carries the fleet's news. Zero over Redis.
	Coverage float64 `json:"gossip_coverage_pct,omitempty"`

	// Converge is how long after the scenario's last change the fleet
	// admitted within 5% of the limit of the ideal, in every window for
	// two windows running; zero when nothing changed.
	Converge Duration `json:"converge"`
}

// metrics counts per key and aligned window.
type metrics struct {
	window  int64
	offered int64
	under   int64     // refused while the ideal had half its burst left
	fleet   [][]int32 // [key][window]
	ideal   [][]int32

	syncKeys, syncBytes int64
}

func (m *metrics) init(keys int, c Config) {
	m.window = int64(c.Window)
	n := int(int64(c.Duration)/m.window) + 1
	m.fleet, m.ideal = make([][]int32, keys), make([][]int32, keys)
	for k := range keys {
		m.fleet[k], m.ideal[k] = make([]int32, n), make([]int32, n)
	}
}

// record counts one request: whether the fleet and the ideal admitted
// it, and what the ideal had left before deciding it (Remaining, plus the
// request itself if admitted) out of its burst.
func (m *metrics) record(k int, at int64, fleet bool, ideal local.Decision) {
	w := at / m.window
	m.offered++
	if !fleet && underLimit(ideal) {
		m.under++
	}
	if fleet {
		m.fleet[k][w]++
	}
	if ideal.Allowed() {
		m.ideal[k][w]++
	}
}

// underLimit reports whether r, the ideal's decision of a request of cost
// 1, found at least half the ideal's burst (r.Limit) left before it.
func underLimit(r local.Decision) bool {
	left := r.Remaining()
	if r.Allowed() {
		left++
	}
	return 2*left >= r.Limit()
}

// result sums the counts up.
func (m *metrics) result(e *engine) *Result {
	c := e.cfg
	r := &Result{
		Scenario: c.Scenario, Backend: c.Backend, Nodes: c.Nodes, Interval: Duration(c.Interval), Shares: c.Shares.String(),
		Algorithm: c.Algorithm.String(), Limit: c.Limit, Window: Duration(c.Window), RTT: Duration(c.RTT),
		Duration: Duration(c.Duration), Seed: c.Seed,
	}
	var over, under int64
	worst := 0
	r.Offered = m.offered
	for k := range m.fleet {
		for w := range m.fleet[k] {
			f, i := int(m.fleet[k][w]), int(m.ideal[k][w])
			r.Admitted += int64(f)
			r.Ideal += int64(i)
			if f > i {
				over += int64(f - i)
				worst = max(worst, f-i)
			} else {
				under += int64(i - f)
			}
		}
	}
	limit := float64(c.Limit)
	r.OvershootWorst = round(100 * float64(worst) / limit)
	if r.Ideal > 0 {
		r.Overshoot = round(100 * float64(over) / float64(r.Ideal))
		r.FalseRejection = round(100 * float64(under) / float64(r.Ideal))
	}
	if m.offered > 0 {
		r.UnderLimit = round(100 * float64(m.under) / float64(m.offered))
	}
	secs := c.Duration.Seconds()
	r.SyncOps = round(float64(m.syncKeys) / secs)
	r.SyncBytes = round(float64(m.syncBytes) / secs)
	r.Coverage = round(e.cov.percent())
	if len(e.changes) > 0 {
		r.Converge = Duration(m.converge(e.changes[len(e.changes)-1], c.Limit))
	}
	return r
}

// converge is how long after t every key's fleet admissions stayed
// within 5% of the limit of the ideal's for two windows running.
func (m *metrics) converge(t int64, limit int64) time.Duration {
	tol := int32(max(1, limit/20))
	first := int(t/m.window) + 1 // the first whole window after t
	n := len(m.fleet[0]) - 1     // the last window is partial
	run := 0
	for w := first; w < n; w++ {
		ok := true
		for k := range m.fleet {
			if d := m.fleet[k][w] - m.ideal[k][w]; d > tol || d < -tol {
				ok = false
				break
			}
		}
		if !ok {
			run = 0
			continue
		}
		if run++; run == 2 {
			return time.Duration(int64(w-1)*m.window - t)
		}
	}
	return time.Duration(int64(n)*m.window - t) // not within the run
}

// round keeps three decimals, so that JSON stays short and stable.
func round(x float64) float64 { return math.Round(x*1000) / 1000 }

// WriteJSON writes v, a Result, a sweep's results or a Recommendation, as
// indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteTable writes r as a short human-readable table.
func (r *Result) WriteTable(w io.Writer) error {
	_, err := fmt.Fprintf(w, `scenario %s over %s: %d nodes, %s, limit %d per %v, sync every %v (%s shares), RTT %v, %v simulated (seed %d)

  offered               %12d
  admitted              %12d   ideal %d (%.2f%%)
  overshoot             %11.3f%%   of the ideal's admissions (worst window: %.3f%% of the limit)
  false rejection       %11.3f%%   of the ideal's admissions
  under-limit refusals  %11.3f%%   of the requests: refused while the ideal had half its burst left
  sync ops              %12.1f/s   %.0f bytes/s on the network
`,
		r.Scenario, r.Backend, r.Nodes, r.Algorithm, r.Limit, time.Duration(r.Window), time.Duration(r.Interval), r.Shares,
		time.Duration(r.RTT), time.Duration(r.Duration), r.Seed,
		r.Offered, r.Admitted, r.Ideal, 100*float64(r.Admitted)/math.Max(1, float64(r.Ideal)),
		r.Overshoot, r.OvershootWorst, r.FalseRejection, r.UnderLimit, r.SyncOps, r.SyncBytes)
	if err == nil && r.Backend == "gossip" {
		_, err = fmt.Fprintf(w, "  gossip coverage       %11.3f%%   of (peer, update) pairs heard within 300 ms\n", r.Coverage)
	}
	if err == nil && r.Converge > 0 {
		_, err = fmt.Fprintf(w, "  converged             %12v   after the last change\n", time.Duration(r.Converge))
	}
	return err
}
