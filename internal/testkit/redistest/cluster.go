package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/hybridlimit/hybridlimit/internal/redisslot"
)

// clusterTimeout bounds how long a new or restarted cluster may take to
// agree on its state. It usually takes just over 2 s: the nodes agree
// within a few hundred milliseconds, but a master refuses to report
// cluster_state:ok until 2 s after it started (CLUSTER_WRITABLE_DELAY in
// Redis's cluster.c, not configurable). The rest is slack for CI machines.
const clusterTimeout = 15 * time.Second

// A Cluster is a Redis Cluster of masters without replicas, started by
// [StartCluster]. Each master owns one contiguous range of slots, and the
// ranges differ in size by at most one slot.
type Cluster struct {
	// Masters are the cluster's nodes; Masters[i] owns the i-th range of
	// slots, so the first master owns slot 0 and the last slot 16383.
	Masters []*Server

	// Addrs are the masters' addresses, in the order of Masters, as a
	// cluster client takes them.
	Addrs []string

	slots []slotRange // slots[i] is the range owned by Masters[i]
}

// A slotRange is a range of hash slots, both ends included.
type slotRange struct{ first, last int }

func (r slotRange) contains(slot int) bool { return r.first <= slot && slot <= r.last }

// StartCluster starts a Redis Cluster of the given number of masters on
// free ports of 127.0.0.1 and waits until every node reports the cluster
// as healthy: see [Cluster.WaitReady]. Extra arguments are passed to every
// node as with [StartServer]. The nodes are killed when the test finishes.
//
// A cluster takes about 2 s to start, because Redis holds a new master
// back that long, so tests should share one where they can.
//
// The cluster is built with commands, not redis-cli: each node is given a
// distinct config epoch and its range of slots, and every node is
// introduced to every other with CLUSTER MEET.
func StartCluster(tb testing.TB, masters int, args ...string) *Cluster {
	tb.Helper()
	if masters < 1 || masters > redisslot.Slots {
		tb.Fatalf("redistest: StartCluster: %d masters; want 1 to %d", masters, redisslot.Slots)
	}
	c := &Cluster{}
	for i := range masters {
		s := startServer(tb, true, args)
		c.Masters = append(c.Masters, s)
		c.Addrs = append(c.Addrs, s.Addr)
		c.slots = append(c.slots, slotRange{i * redisslot.Slots / masters, (i+1)*redisslot.Slots/masters - 1})
	}

	clients := make([]*redis.Client, masters)
	for i, s := range c.Masters {
		clients[i] = redis.NewClient(s.Options())
		defer clients[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	// Config epochs can only be set while a node knows no other node, so
	// every node gets its epoch and slots before any meeting starts.
	for i, cl := range clients {
		if err := setUpNode(ctx, cl, i+1, c.slots[i]); err != nil {
			tb.Fatalf("redistest: setting up cluster node %s: %v", c.Addrs[i], err)
		}
	}
	// Meeting one node would be enough for Redis, which spreads the news of
	// the others by gossip. But with a node timeout of 2 s a pair of nodes
	// exchanges gossip only about once a second, so a node can wait seconds
	// to hear of a third; every pair meeting directly takes a cron tick.
	for i, cl := range clients {
		for _, o := range c.Masters[i+1:] {
			// MEET must name the bus port, because it is not the default
			// port+10000; go-redis's ClusterMeet has no argument for it.
			if err := cl.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", o.Port, o.busPort).Err(); err != nil {
				tb.Fatalf("redistest: cluster node %s: CLUSTER MEET %s: %v", c.Addrs[i], o.Addr, err)
			}
		}
	}
	c.WaitReady(tb)
	return c
}

// setUpNode gives a cluster node that knows no other nodes its config
// epoch and its slots.
func setUpNode(ctx context.Context, cl *redis.Client, epoch int, slots slotRange) error {
	// Distinct epochs spare the nodes from resolving epoch collisions,
	// which all-zero epochs would make them do by gossip, slowly.
	if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", epoch).Err(); err != nil {
		return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH %d: %v", epoch, err)
	}
	if err := cl.ClusterAddSlotsRange(ctx, slots.first, slots.last).Err(); err != nil {
		return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d: %v", slots.first, slots.last, err)
	}
	return nil
}

// WaitReady waits until every master answers, reports cluster_state:ok,
// knows all the masters as connected masters and no other nodes, and maps
// every slot to the master that was given it. Cluster clients created
// before then can see a partial cluster, so StartCluster calls WaitReady;
// tests call it again after restarting masters, which takes about 2 s
// for the same reason as StartCluster.
func (c *Cluster) WaitReady(tb testing.TB) {
	tb.Helper()
	clients := make([]*redis.Client, len(c.Masters))
	for i, s := range c.Masters {
		opt := s.Options()
		// Polling must not stall on a node that is down, and a failed poll
		// is retried anyway.
		opt.MaxRetries = -1
		opt.DialerRetries = 1
		opt.DialTimeout = time.Second
		clients[i] = redis.NewClient(opt)
		defer clients[i].Close()
	}
	deadline := time.Now().Add(clusterTimeout)
	for {
		var errs []error
		for i, cl := range clients {
			// Dialing a server known to be down would only fill the test
			// log with go-redis's complaints, once per poll.
			err := errors.New("not running")
			if c.Masters[i].Running() {
				err = c.checkNode(cl)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c.Addrs[i], err))
			}
		}
		if len(errs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: cluster not ready after %v:\n%v", clusterTimeout, errors.Join(errs...))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkNode returns what keeps the node cl is connected to from having the
// full view of the cluster, or nil.
func (c *Cluster) checkNode(cl *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	info, err := cl.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	fields := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	for _, want := range [][2]string{
		{"cluster_known_nodes", strconv.Itoa(len(c.Masters))},
		{"cluster_slots_assigned", strconv.Itoa(redisslot.Slots)},
		{"cluster_size", strconv.Itoa(len(c.Masters))},
		{"cluster_state", "ok"},
	} {
		if k, v := want[0], want[1]; fields[k] != v {
			return fmt.Errorf("CLUSTER INFO: %s:%s, want %s", k, fields[k], v)
		}
	}

	nodes, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	seen := 0
	for line := range strings.Lines(nodes) {
		// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
		// <pong-recv> <config-epoch> <link-state> <slot> ...
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		switch {
		case !slices.Contains(c.Addrs, addr):
			return fmt.Errorf("CLUSTER NODES: unknown node %s", addr)
		case !slices.Contains(flags, "master"):
			return fmt.Errorf("CLUSTER NODES: %s is not a master: %s", addr, f[2])
		case slices.ContainsFunc(flags, func(f string) bool {
			return f == "fail" || f == "fail?" || f == "handshake" || f == "noaddr"
		}):
			return fmt.Errorf("CLUSTER NODES: %s is %s", addr, f[2])
		case f[7] != "connected":
			return fmt.Errorf("CLUSTER NODES: %s is %s", addr, f[7])
		}
		seen++
	}
	if seen != len(c.Masters) {
		return fmt.Errorf("CLUSTER NODES: %d nodes, want %d", seen, len(c.Masters))
	}

	// CLUSTER SLOTS is what go-redis's cluster client routes by, so it is
	// the view to check, though CLUSTER SHARDS supersedes it in Redis 7.0.
	//lint:ignore SA1019 go-redis's ClusterClient still loads CLUSTER SLOTS.
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	owned := 0
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			return fmt.Errorf("CLUSTER SLOTS: slots %d-%d have no node", r.Start, r.End)
		}
		i := slices.IndexFunc(c.slots, func(sr slotRange) bool { return sr.contains(int(r.Start)) })
		if i < 0 || !c.slots[i].contains(int(r.End)) || r.Nodes[0].Addr != c.Addrs[i] {
			return fmt.Errorf("CLUSTER SLOTS: slots %d-%d on %s, not as assigned", r.Start, r.End, r.Nodes[0].Addr)
		}
		owned += int(r.End - r.Start + 1)
	}
	if owned != redisslot.Slots {
		return fmt.Errorf("CLUSTER SLOTS: %d slots served, want %d", owned, redisslot.Slots)
	}
	return nil
}

// MasterFor returns the master that owns key's hash slot. It answers from
// the assignment made by StartCluster, so it stays right while masters are
// down, but not if a test moves slots itself.
func (c *Cluster) MasterFor(key string) *Server {
	slot := redisslot.Of(key)
	for i, r := range c.slots {
		if r.contains(slot) {
			return c.Masters[i]
		}
	}
	panic("redistest: slot " + strconv.Itoa(slot) + " has no master") // cannot happen: the ranges cover all slots
}

// ClusterOptions returns go-redis options for a client of the cluster, for
// tests that need to change the defaults before creating a client. Like
// [Server.Options], they skip handshake steps Redis 7.0 does not know.
func (c *Cluster) ClusterOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                    slices.Clone(c.Addrs),
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// ClusterClient returns a cluster client with [Cluster.ClusterOptions],
// closed when tb's test finishes.
func (c *Cluster) ClusterClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(c.ClusterOptions())
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// DeadlineClient is ClusterClient with ContextTimeoutEnabled, so every
// call honours its context's deadline, as global.NewRedis requires.
func (c *Cluster) DeadlineClient(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	o := c.ClusterOptions()
	o.ContextTimeoutEnabled = true
	cc := redis.NewClusterClient(o)
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// FlushAll deletes every key on every master.
func (c *Cluster) FlushAll(tb testing.TB) {
	tb.Helper()
	for _, s := range c.Masters {
		s.FlushAll(tb)
	}
}
