package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// serviceNode is one hybridlimitd process of the service demo, and what
// the load generator saw of it.
type serviceNode struct {
	name              string
	http, gossip      string // addresses, host:port
	args              []string
	logPath           string
	cmd               *exec.Cmd
	exited            chan struct{} // closed when cmd has exited
	exitErr           error
	down              atomic.Bool // killed, not yet ready again
	offered, admitted atomic.Int64
	failed, hot       atomic.Int64 // failed: no answer, or not one of allowed or refused
}

// runService is the fleet demo with every node a hybridlimitd process of
// its own: the rules file gives each tenant d.limit requests a second,
// the nodes share it over gossip (and Redis, with d.redis), and the load
// generator asks their HTTP check endpoint (POST /v1/check) for each
// request. Under the split scenario the last node is killed (SIGKILL: no
// goodbye, its leases lost) at a third of the run and started again at
// two thirds.
func (d *fleetDemo) runService(ctx context.Context, w io.Writer) (*fleetSummary, error) {
	if d.nodes < 1 || d.nodes > 16 {
		return nil, fmt.Errorf("-nodes %d: want 1 to 16 with -service", d.nodes)
	}
	if d.scenario != "split" && d.scenario != "steady" {
		return nil, fmt.Errorf("-scenario %q: want split (a node killed and restarted) or steady with -service", d.scenario)
	}
	dir, err := os.MkdirTemp("", "hybridlimit-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin, err := d.findServer(ctx, dir)
	if err != nil {
		return nil, err
	}
	rulesFile := filepath.Join(dir, "rules.yaml")
	rules := fmt.Sprintf("rules:\n  - name: tenant\n    key: [tenant]\n    limit: %d\n    window: 1s\n", d.limit)
	if err := os.WriteFile(rulesFile, []byte(rules), 0o600); err != nil {
		return nil, err
	}
	var nodes []*serviceNode
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for i := range d.nodes {
		n := &serviceNode{name: fmt.Sprintf("node-%d", i+1), logPath: filepath.Join(dir, fmt.Sprintf("node-%d.log", i+1))}
		if n.http, err = freeAddr(); err != nil {
			return nil, err
		}
		if n.gossip, err = freeAddr(); err != nil {
			return nil, err
		}
		n.args = []string{"--config", rulesFile, "--node", n.name, "--http", n.http, "--gossip-bind", n.gossip,
			"--sync-interval", d.sync.String(), "--shutdown-grace", "1s"}
		if i > 0 {
			n.args = append(n.args, "--gossip-seeds", nodes[0].gossip)
		}
		if d.redis != "" {
			n.args = append(n.args, "--redis", d.redis)
		}
		nodes = append(nodes, n)
		if err := n.start(ctx, bin); err != nil {
			return nil, err
		}
	}

	backend := "gossip"
	if d.redis != "" {
		backend = "redis, gossip as failover"
	}
	fmt.Fprintf(w, "%d hybridlimitd processes on 127.0.0.1 over %s, syncing every %v; limit %d req/s per tenant, fleet-wide.\n",
		d.nodes, backend, d.sync, d.limit)
	fmt.Fprintf(w, "Load: %.0f req/s to each node's POST /v1/check, half on tenant %q, the rest over %d others.\n",
		d.rate, hotKey, coldKeys)
	if d.scenario == "split" && d.nodes > 1 {
		fmt.Fprintf(w, "At %v %s is killed (SIGKILL); at %v it is started again.\n", d.duration/3, nodes[len(nodes)-1].name, 2*d.duration/3)
	}
	for _, n := range nodes {
		fmt.Fprintf(w, "%s serves its metrics at http://%s/metrics.\n", n.name, n.http)
	}
	fmt.Fprintln(w, "Each cell: allowed/asked in the last second, and the node's /readyz (R ready, N not ready, - down).")
	fmt.Fprintln(w)
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name
	}
	printHeader(w, names, 13)

	runCtx, cancel := context.WithTimeout(ctx, d.duration)
	defer cancel()
	var load sync.WaitGroup
	for i, n := range nodes {
		load.Go(func() { d.ask(runCtx, n, uint64(i)) })
	}
	sum := &fleetSummary{Nodes: d.nodes, Sync: d.sync.String(), Backend: backend + ", hybridlimitd processes", Limit: d.limit}
	start := time.Now()
	tick := time.NewTicker(d.tick)
	defer tick.Stop()
	killed, restarted := false, false
	back := make(chan string, 1) // the restarted node's event
	worst := 0.0
	last := make([][2]int64, len(nodes))
	lastHot, lastRow := int64(0), time.Duration(0)
	for running := true; running; {
		select {
		case <-runCtx.Done():
			running = false
		case <-tick.C:
		}
		elapsed := time.Since(start)
		victim := nodes[len(nodes)-1]
		if d.scenario == "split" && d.nodes > 1 && running {
			if !killed && elapsed >= d.duration/3 {
				killed = true
				victim.kill()
				sum.Events = append(sum.Events, fmt.Sprintf("%v: %s killed", elapsed.Round(time.Second), victim.name))
			}
			if killed && !restarted && elapsed >= 2*d.duration/3 {
				restarted = true
				sum.Events = append(sum.Events, fmt.Sprintf("%v: %s started again", elapsed.Round(time.Second), victim.name))
				load.Go(func() { // the table goes on while it starts
					began := time.Now()
					if err := victim.start(runCtx, bin); err != nil {
						back <- fmt.Sprintf("%s did not start again: %v", victim.name, err)
						return
					}
					back <- fmt.Sprintf("%v: %s ready again, %v after its start", time.Since(start).Round(time.Second), victim.name, time.Since(began).Round(10*time.Millisecond))
				})
			}
		}
		select {
		case e := <-back:
			sum.Events = append(sum.Events, e)
		default:
		}
		row := fmt.Sprintf("%6s", elapsed.Round(time.Second))
		hot := int64(0)
		for _, n := range nodes {
			hot += n.hot.Load()
		}
		second := hot - lastHot
		for i, n := range nodes {
			off, adm := n.offered.Load(), n.admitted.Load()
			row += fmt.Sprintf(" %11s %s", fmt.Sprintf("%d/%d", adm-last[i][1], off-last[i][0]), n.readiness())
			last[i] = [2]int64{off, adm}
		}
		rowDur := elapsed - lastRow
		lastHot, lastRow = hot, elapsed
		if running {
			row += fmt.Sprintf(" %10d (%d)", second, d.limit)
			if second > d.limit {
				row += fmt.Sprintf(" +%.0f%%", 100*float64(second-d.limit)/float64(d.limit))
			}
			perSec := int64(math.Round(float64(second) / max(rowDur, time.Second/2).Seconds()))
			if elapsed > 2500*time.Millisecond { // the first seconds spend the bucket's burst
				sum.HotWorst = max(sum.HotWorst, perSec)
				worst = max(worst, float64(perSec-d.limit)/float64(d.limit))
			}
			fmt.Fprintln(w, row)
		}
	}
	load.Wait()
	select {
	case e := <-back:
		sum.Events = append(sum.Events, e)
	default:
	}
	elapsed := time.Since(start)
	sum.Elapsed = elapsed.Round(time.Millisecond).String()
	sum.HotRate = math.Round(float64(lastHot)/elapsed.Seconds()*10) / 10
	sum.Overshoot = math.Round(math.Max(0, worst)*1000) / 10
	for _, n := range nodes {
		off, adm, failed := n.offered.Load(), n.admitted.Load(), n.failed.Load()
		health := map[string]string{"R": "ready", "N": "not ready", "-": "down"}[n.readiness()]
		sum.PerNode = append(sum.PerNode, fleetNodeSummary{Name: n.name, Offered: off, Admitted: adm, Refused: off - adm - failed, Failed: failed, Health: health})
	}
	return sum, nil
}

// findServer is d.server if set, else hybridlimitd built from this
// module into dir with the go command.
func (d *fleetDemo) findServer(ctx context.Context, dir string) (string, error) {
	if d.server != "" {
		return d.server, nil
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("-service needs hybridlimitd: give -hybridlimitd PATH, or run where the go command is on PATH")
	}
	bin := filepath.Join(dir, "hybridlimitd")
	var out bytes.Buffer
	build := exec.CommandContext(ctx, gocmd, "build", "-o", bin, "github.com/hybridlimit/hybridlimit/cmd/hybridlimitd")
	build.Stdout, build.Stderr = &out, &out
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building hybridlimitd (run from the module's directory, or give -hybridlimitd PATH): %v\n%s", err, out.String())
	}
	return bin, nil
}

// start runs n's process and waits until its /readyz answers 200.
func (n *serviceNode) start(ctx context.Context, bin string) error {
	logFile, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	n.cmd = exec.Command(bin, n.args...)
	n.cmd.Stdout, n.cmd.Stderr = logFile, logFile
	if err := n.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", n.name, err)
	}
	n.exited = make(chan struct{})
	go func() {
		n.exitErr = n.cmd.Wait()
		logFile.Close()
		close(n.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for n.probe() != "R" {
		select {
		case <-n.exited:
			return fmt.Errorf("%s exited (%v); its log:\n%s", n.name, n.exitErr, n.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w; its log:\n%s", n.name, ctx.Err(), n.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within 30s; its log:\n%s", n.name, n.logTail())
		}
	}
	n.down.Store(false)
	return nil
}

// logTail is the end of n's log.
func (n *serviceNode) logTail() string {
	log, _ := os.ReadFile(n.logPath)
	const most = 2000
	if len(log) > most {
		log = log[len(log)-most:]
	}
	return string(log)
}

// kill ends n's process at once, as a crash or an OOM kill would.
func (n *serviceNode) kill() {
	n.down.Store(true)
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// stop ends n's process gracefully (SIGTERM: it drains and hands its
// leases back), killing it if it has not exited within 5 s.
func (n *serviceNode) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// readiness is n's /readyz: "R" ready, "N" not ready, "-" down (killed,
// and not yet ready again).
func (n *serviceNode) readiness() string {
	if n.down.Load() {
		return "-"
	}
	return n.probe()
}

// probe asks n's /readyz: "R" ready, "N" not ready, "-" no answer.
func (n *serviceNode) probe() string {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + n.http + "/readyz")
	if err != nil {
		return "-"
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "N"
	}
	return "R"
}

// ask offers n its share of the load until ctx is done, through its
// HTTP check endpoint. A request to a node that is down is not counted.
func (d *fleetDemo) ask(ctx context.Context, n *serviceNode, seed uint64) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(seed, 42))
	url := "http://" + n.http + "/v1/check"
	start := time.Now()
	sent := 0
	for ctx.Err() == nil {
		due := int(d.rate * time.Since(start).Seconds())
		for ; sent < due && ctx.Err() == nil; sent++ {
			if n.down.Load() {
				continue
			}
			key := hotKey
			if rng.IntN(2) == 0 {
				key = coldNames[rng.IntN(coldKeys)]
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"tenant":"`+key+`"}`))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				if ctx.Err() == nil && !n.down.Load() {
					n.offered.Add(1)
					n.failed.Add(1)
				}
				continue
			}
			var got struct {
				Allowed *bool `json:"allowed"`
			}
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			n.offered.Add(1)
			switch {
			case err != nil || resp.StatusCode != http.StatusOK || got.Allowed == nil:
				n.failed.Add(1)
			case *got.Allowed:
				n.admitted.Add(1)
				if key == hotKey {
					n.hot.Add(1)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// freeAddr is a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
