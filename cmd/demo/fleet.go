package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/redis/go-redis/v9"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/httplimit"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/faultnet"
	"github.com/hybridlimit/hybridlimit/partition"
	"github.com/hybridlimit/hybridlimit/sim"
)

// fleetDemo runs a fleet on this machine: nodes in one process, each a
// hybrid Limiter over real memberlist gossip on loopback (and Redis, if
// given) behind the httplimit middleware on its own HTTP port, and a load
// generator that calls them over real HTTP.
type fleetDemo struct {
	nodes    int
	sync     time.Duration
	duration time.Duration
	scenario string      // "split", "steady" or "changes"
	upgraded atomic.Bool // changes: the hot tenant is on the pro tier
	redis    string
	metrics  string // serve the nodes' metrics at this address (metrics.go)
	service  bool   // every node a hybridlimitd process (service.go)
	server   string // the hybridlimitd binary; "" builds it
	json     bool
	rate     float64 // requests per second offered to each node
	limit    int64   // per tenant per second, fleet-wide
	tick     time.Duration
}

// hotKey takes half the traffic; the rest spreads over coldKeys tenants,
// named once so that the load generator does not format a name per
// request.
const (
	hotKey   = "hot"
	coldKeys = 9
)

var coldNames = func() (names [coldKeys]string) {
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i+1)
	}
	return names
}()

// demoNode is one node: its gossip, Limiter and HTTP server, and what the
// load generator saw of it.
type demoNode struct {
	name string
	g    *gossip.Gossip
	l    *hybrid.Limiter
	srv  *http.Server
	url  string

	offered, admitted, failed, hot atomic.Int64 // failed: neither admitted nor refused
}

// fleetSummary is the demo's result.
type fleetSummary struct {
	Nodes     int                `json:"nodes"`
	Sync      string             `json:"sync"`
	Backend   string             `json:"backend"`
	Elapsed   string             `json:"elapsed"`
	Limit     int64              `json:"limit_per_tenant_per_s"`
	PerNode   []fleetNodeSummary `json:"per_node"`
	HotRate   float64            `json:"hot_admitted_per_s"`
	HotWorst  int64              `json:"hot_worst_second"`
	Overshoot float64            `json:"hot_worst_overshoot_pct"`
	// HotCutRate is the hot tenant's admissions a second from a second
	// after the cut to the heal (split scenario; 0 otherwise): what each
	// side's shares hold while neither hears the other.
	HotCutRate float64  `json:"hot_admitted_per_s_during_cut"`
	Events     []string `json:"events"`
	Dropped    int64    `json:"gossip_messages_dropped"` // by the cut
}

type fleetNodeSummary struct {
	Name     string   `json:"name"`
	Offered  int64    `json:"offered"`
	Admitted int64    `json:"admitted"`
	Refused  int64    `json:"refused"`
	Failed   int64    `json:"failed"` // answers neither 200 nor a refusal (429, 503)
	Health   string   `json:"health"`
	HotKeys  []string `json:"hot_keys"` // as "key (N stripes)"
}

func (d *fleetDemo) run(ctx context.Context, w io.Writer) (*fleetSummary, error) {
	if d.nodes < 1 || d.nodes > 64 {
		return nil, fmt.Errorf("-nodes %d: want 1 to 64", d.nodes)
	}
	if d.scenario != "split" && d.scenario != "steady" && d.scenario != "changes" {
		return nil, fmt.Errorf("-scenario %q: want split, steady or changes", d.scenario)
	}
	network := faultnet.New()
	var transports []*faultnet.Transport
	var nodes []*demoNode
	var rdb *redis.Client
	defer func() {
		for _, n := range nodes {
			shutdown(n)
		}
		if rdb != nil {
			rdb.Close()
		}
	}()
	backend := "gossip"
	if d.redis != "" {
		backend = "redis, gossip as failover"
		rdb = redis.NewClient(&redis.Options{Addr: d.redis, ContextTimeoutEnabled: true})
	}
	for i := range d.nodes {
		n, err := d.start(i, nodes, network, &transports, rdb)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	if err := waitMembers(ctx, nodes, 10*time.Second); err != nil {
		return nil, err
	}
	if d.metrics != "" {
		stop, err := serveMetrics(d.metrics, nodes)
		if err != nil {
			return nil, fmt.Errorf("-metrics %s: %w", d.metrics, err)
		}
		defer stop()
		fmt.Fprintf(w, "Every node's metrics (labelled node=...) at http://%s/metrics.\n", d.metrics)
	}

	fmt.Fprintf(w, "%d nodes on 127.0.0.1 over %s, syncing every %v; limit %d req/s per tenant, fleet-wide.\n",
		d.nodes, backend, d.sync, d.limit)
	fmt.Fprintf(w, "Load: %.0f req/s to each node over HTTP, half on tenant %q, the rest over %d others.\n",
		d.rate, hotKey, coldKeys)
	if d.scenario == "split" && d.nodes > 1 {
		fmt.Fprintf(w, "At %v %s is cut off from the others; at %v the network heals.\n",
			d.duration/3, nodes[len(nodes)-1].name, 2*d.duration/3)
	}
	if d.scenario == "changes" {
		fmt.Fprintf(w, "At %v the backend asks for half (a load factor of 0.5 on every node); at %v it is back to 1\n", d.duration/3, 2*d.duration/3)
		fmt.Fprintf(w, "and tenant %q upgrades to the pro tier (%d req/s): its key keeps what it spent.\n", hotKey, 2*d.limit)
	}
	fmt.Fprintln(w, "Each cell: admitted/offered in the last second, the node's share of the hot tenant's")
	fmt.Fprintln(w, "admissions, and its health (H healthy, D degraded, E emergency).")
	fmt.Fprintln(w)
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.name
	}
	printHeader(w, names, 17)

	ctx, cancel := context.WithTimeout(ctx, d.duration)
	defer cancel()
	var load sync.WaitGroup
	for i, n := range nodes {
		load.Go(func() { d.drive(ctx, n, uint64(i)) })
	}

	sum := &fleetSummary{Nodes: d.nodes, Sync: d.sync.String(), Backend: backend, Limit: d.limit}
	start := time.Now()
	tick := time.NewTicker(d.tick)
	defer tick.Stop()
	cutAt, healAt := d.duration/3, 2*d.duration/3
	cut, healed := false, false
	cutHot, cutFrom := int64(0), time.Duration(0) // the hot tenant's admissions a second into the cut, and when
	limit, changedAt, worst := d.limit, time.Duration(-1), 0.0
	last := make([][3]int64, len(nodes))
	lastHot, lastRow := int64(0), time.Duration(0)
	levels := make([]partition.Level, len(nodes))
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-tick.C:
		}
		elapsed := time.Since(start)
		healing := false // the network healed at this tick
		if d.scenario == "split" && d.nodes > 1 {
			if !cut && elapsed >= cutAt {
				cut = true
				network.Partition([]string{transports[len(transports)-1].Addr()})
				sum.Events = append(sum.Events, fmt.Sprintf("%v: %s cut off", elapsed.Round(time.Second), nodes[len(nodes)-1].name))
			}
			if cut && !healed && elapsed >= healAt {
				healed, healing = true, true
				network.Heal()
				sum.Events = append(sum.Events, fmt.Sprintf("%v: network healed", elapsed.Round(time.Second)))
			}
		}
		if d.scenario == "changes" {
			if !cut && elapsed >= cutAt {
				cut, limit, changedAt = true, d.limit/2, elapsed
				sum.Events = append(sum.Events, d.change(nodes, elapsed, 0.5, false))
			}
			if cut && !healed && elapsed >= healAt {
				healed, limit, changedAt = true, 2*d.limit, elapsed
				sum.Events = append(sum.Events, d.change(nodes, elapsed, 1, true))
			}
		}
		row := fmt.Sprintf("%6s", elapsed.Round(time.Second))
		hot, hotNow := int64(0), make([]int64, len(nodes))
		for i, n := range nodes {
			hotNow[i] = n.hot.Load()
			hot += hotNow[i]
		}
		second := hot - lastHot
		switch {
		case cut && !healed && cutFrom == 0 && elapsed >= cutAt+time.Second:
			cutHot, cutFrom = hot, elapsed
		case healing && cutFrom > 0:
			sum.HotCutRate = math.Round(float64(hot-cutHot)/(elapsed-cutFrom).Seconds()*10) / 10
		}
		for i, n := range nodes {
			off, adm := n.offered.Load(), n.admitted.Load()
			h := n.l.Health()
			if h.Level != levels[i] {
				sum.Events = append(sum.Events, fmt.Sprintf("%v: %s %s (factor %.2f)", elapsed.Round(time.Second), n.name, h.Level, h.Factor))
				levels[i] = h.Level
			}
			share := 0.0
			if second > 0 {
				share = 100 * float64(hotNow[i]-last[i][2]) / float64(second)
			}
			row += fmt.Sprintf(" %9s %3.0f%% %s", fmt.Sprintf("%d/%d", adm-last[i][1], off-last[i][0]), share, strings.ToUpper(h.Level.String()[:1]))
			last[i] = [3]int64{off, adm, hotNow[i]}
		}
		rowDur := elapsed - lastRow
		lastHot, lastRow = hot, elapsed
		if running {
			over := float64(second-limit) / float64(limit) * 100
			row += fmt.Sprintf(" %10d (%d)", second, limit)
			if over > 0 {
				row += fmt.Sprintf(" +%.0f%%", over)
			}
			// A token bucket starts full: its burst is spent in the
			// first seconds, and is no overshoot. A ticker drops ticks
			// when the loop falls behind, so a row can cover more than a
			// second: the busiest second is the row's rate per second.
			perSec := int64(math.Round(float64(second) / max(rowDur, time.Second/2).Seconds()))
			// The row that spans a change counts under neither limit.
			if elapsed > 2500*time.Millisecond && elapsed-changedAt > 1500*time.Millisecond {
				sum.HotWorst = max(sum.HotWorst, perSec)
				worst = max(worst, float64(perSec-limit)/float64(limit))
			}
			fmt.Fprintln(w, row)
		}
	}
	load.Wait()
	elapsed := time.Since(start)
	sum.Elapsed = elapsed.Round(time.Millisecond).String()
	sum.HotRate = math.Round(float64(lastHot)/elapsed.Seconds()*10) / 10
	sum.Overshoot = math.Round(math.Max(0, worst)*1000) / 10
	for _, n := range nodes {
		var hot []string
		for _, h := range n.l.HotKeys() {
			if h.Shards > 0 {
				hot = append(hot, fmt.Sprintf("%s (%d Redis shards)", h.Key, h.Shards))
			} else {
				hot = append(hot, fmt.Sprintf("%s (%d stripes)", h.Key, h.Stripes))
			}
		}
		off, adm, failed := n.offered.Load(), n.admitted.Load(), n.failed.Load()
		sum.PerNode = append(sum.PerNode, fleetNodeSummary{n.name, off, adm, off - adm - failed, failed, n.l.Health().Level.String(), hot})
	}
	for _, t := range transports {
		sum.Dropped += t.Dropped()
	}
	return sum, nil
}

// change sets the load factor f on every node, and upgrades the hot
// tenant if upgrade (Invalidate: its key moves to the pro policy keeping
// what it spent); it returns the event.
func (d *fleetDemo) change(nodes []*demoNode, at time.Duration, f float64, upgrade bool) string {
	if upgrade {
		d.upgraded.Store(true)
	}
	for _, n := range nodes {
		_ = n.l.SetLoadFactor(f) // 0.5 or 1: in range
		if upgrade {
			n.l.Invalidate("tenant:" + hotKey)
		}
	}
	if upgrade {
		return fmt.Sprintf("%v: load factor %v; %s upgraded to pro", at.Round(time.Second), f, hotKey)
	}
	return fmt.Sprintf("%v: load factor %v", at.Round(time.Second), f)
}

// start starts node i: its gossip (seeded with the first node), its
// Limiter and its HTTP server.
func (d *fleetDemo) start(i int, others []*demoNode, network *faultnet.Network, transports *[]*faultnet.Transport, rdb *redis.Client) (*demoNode, error) {
	n := &demoNode{name: fmt.Sprintf("node-%d", i+1)}
	cfg := gossip.Config{
		Name: n.name, BindAddr: "127.0.0.1", RejoinInterval: 2 * time.Second,
		// Failure detection a few times faster than memberlist's LAN
		// defaults, so that the cut-off node learns within the cut that
		// it is alone: it probes one peer per interval, and a node cut
		// off alone gathers no confirmation of its suspicions, so
		// memberlist would wait up to 6 suspicion timeouts per peer.
		Tune: func(m *memberlist.Config) {
			m.ProbeInterval, m.SuspicionMult, m.SuspicionMaxTimeoutMult = 500*time.Millisecond, 3, 1
		},
		WrapTransport: func(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
			w := network.Wrap(t)
			*transports = append(*transports, w)
			return w
		},
	}
	if len(others) > 0 {
		cfg.Seeds = []string{others[0].g.Addr()}
	}
	var err error
	if n.g, err = gossip.New(cfg); err != nil {
		return nil, err
	}
	hc := hybrid.Config{
		Node: n.name, Interval: d.sync, Syncer: n.g,
		// The hot tenant is offered about half of each node's load: far
		// below the production threshold, but the demo should show the
		// stripes (docs/hotkeys.md).
		HotKeyRate: d.rate / 4,
		Policies: []hybrid.Policy{{Name: "tenant", Prefix: "tenant:", Limit: d.limit, Window: time.Second},
			{Name: "pro", Prefix: "pro:", Limit: 2 * d.limit, Window: time.Second}},
		// A tenant's tier, as a service would read it from its accounts.
		Resolve: func(key string) string {
			if key == "tenant:"+hotKey && d.upgraded.Load() {
				return "pro"
			}
			return ""
		},
	}
	if rdb != nil {
		fleet, err := global.NewRedis(context.Background(), global.RedisConfig{Client: rdb})
		if err != nil {
			n.g.Close()
			return nil, fmt.Errorf("-redis %s: %w", d.redis, err)
		}
		hc.Syncer, hc.Failover = fleet, n.g
	}
	if n.l, err = hybrid.New(hc); err != nil {
		n.g.Close()
		return nil, err
	}
	mw, err := httplimit.New(httplimit.Config{
		Limiter: n.l, UnavailableWhenDegraded: false,
		Limits: []httplimit.Limit{{Name: "tenant", Key: httplimit.Header("X-Tenant")}}, // the policy's prefix and window
	})
	if err != nil {
		shutdown(n)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		shutdown(n)
		return nil, err
	}
	n.url = "http://" + ln.Addr().String() + "/"
	n.srv = &http.Server{Handler: mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = n.srv.Serve(ln) }()
	return n, nil
}

// shutdown stops a node: HTTP first, then the Limiter (its last report),
// then gossip (its farewell).
func shutdown(n *demoNode) {
	if n.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = n.srv.Shutdown(ctx)
		cancel()
	}
	if n.l != nil {
		_ = n.l.Close()
	}
	if n.g != nil {
		_ = n.g.Close()
	}
}

// waitMembers waits until every node sees the whole fleet.
func waitMembers(ctx context.Context, nodes []*demoNode, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		all := true
		for _, n := range nodes {
			all = all && len(n.g.Members()) == len(nodes)
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the gossip fleet did not form within 10s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// drive offers n its share of the load until ctx is done, over HTTP.
func (d *fleetDemo) drive(ctx context.Context, n *demoNode, seed uint64) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(seed, 42))
	start := time.Now()
	sent := 0
	for ctx.Err() == nil {
		due := int(d.rate * time.Since(start).Seconds())
		for ; sent < due && ctx.Err() == nil; sent++ {
			key := hotKey
			if rng.IntN(2) == 0 {
				key = coldNames[rng.IntN(coldKeys)]
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.url, nil)
			req.Header.Set("X-Tenant", key)
			resp, err := client.Do(req)
			if err != nil {
				continue // the run ended, or the node is shutting down
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			n.offered.Add(1)
			switch resp.StatusCode {
			case http.StatusOK:
				n.admitted.Add(1)
				if key == hotKey {
					n.hot.Add(1)
				}
			case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			default:
				n.failed.Add(1)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// print writes the summary as text or JSON.
func (s *fleetSummary) print(w io.Writer, asJSON bool) error {
	if asJSON {
		return sim.WriteJSON(w, s)
	}
	fmt.Fprintf(w, "\nIn %s over %s (sync every %s):\n", s.Elapsed, s.Backend, s.Sync)
	for _, n := range s.PerNode {
		hot := ""
		if len(n.HotKeys) > 0 {
			hot = "  hot: " + strings.Join(n.HotKeys, ", ")
		}
		fmt.Fprintf(w, "  %-8s offered %6d  admitted %6d  refused %6d  now %s%s\n", n.Name, n.Offered, n.Admitted, n.Refused, n.Health, hot)
	}
	fmt.Fprintf(w, "Hot tenant: %.1f admitted/s on average against a limit of %d/s; busiest second after the burst %d (%.1f%% over).\n",
		s.HotRate, s.Limit, s.HotWorst, s.Overshoot)
	for _, e := range s.Events {
		fmt.Fprintf(w, "  %s\n", e)
	}
	return nil
}

// printHeader writes the table's header: time, a column of width for
// each node, and the hot tenant's; then a rule under it.
func printHeader(w io.Writer, nodes []string, width int) {
	header := fmt.Sprintf("%6s", "time")
	for _, n := range nodes {
		header += fmt.Sprintf(" %*s", width, n)
	}
	header += fmt.Sprintf(" %18s", "hot tenant (limit)")
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, strings.Repeat("-", len(header)))
}
