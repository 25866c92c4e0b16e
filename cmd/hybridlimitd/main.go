// Command hybridlimitd serves hybridlimit to programs that are not Go:
// the Envoy rate limit service over gRPC (an envoyproxy/ratelimit
// configuration), an HTTP rate check and the rules API (a rules file),
// /metrics, /healthz and /readyz. Its nodes share limits through Redis,
// through each other over gossip, or both (gossip as failover); with
// neither, each limits alone.
//
//	go run ./cmd/hybridlimitd --config docs/examples/rules.yaml
//
// Every flag can be set from the environment too: --redis is
// HYBRIDLIMITD_REDIS. docs/server.md has the rest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	config       string   // rules file
	envoy        []string // envoyproxy/ratelimit configuration files or directories
	httpAddr     string
	grpcAddr     string
	redis        string
	gossipBind   string
	gossipSeeds  string
	gossipKey    string // file
	node         string
	adminToken   string // file
	gossipGrace  time.Duration
	tlsCert      string
	tlsKey       string
	headers      bool
	shared       bool // the rules live in Redis
	grace        time.Duration
	syncInterval time.Duration
}

// parse reads args, then the environment for flags args did not set;
// usage is where -h writes the flags.
func parse(args []string, env func(string) string, usage io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("hybridlimitd", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.StringVar(&o.config, "config", "", "rules file (YAML or JSON): the rules of the HTTP check and the rules API")
	fs.Func("envoy-config", "an envoyproxy/ratelimit configuration file or directory, for the gRPC rate limit service (repeatable)", func(s string) error {
		o.envoy = append(o.envoy, s)
		return nil
	})
	fs.StringVar(&o.httpAddr, "http", ":8080", "HTTP address: /v1/check, /admin/v1/, /metrics, /healthz, /readyz")
	fs.StringVar(&o.grpcAddr, "grpc", ":8081", "gRPC address of the Envoy rate limit service (with --envoy-config)")
	fs.StringVar(&o.redis, "redis", "", "Redis address (host:port) the nodes share limits through")
	fs.StringVar(&o.gossipBind, "gossip-bind", "", "gossip address (host:port) to share limits with the other nodes, or to fail over to with --redis")
	fs.StringVar(&o.gossipSeeds, "gossip-seeds", "", "comma-separated members to join, or a DNS name for many (a Kubernetes headless service)")
	fs.StringVar(&o.gossipKey, "gossip-key-file", "", "file holding the gossip secret key (16, 24 or 32 bytes)")
	fs.DurationVar(&o.gossipGrace, "gossip-grace", 30*time.Second, "how long a member gone silent (crashed, or cut off) keeps its share of each limit reserved; one that stops gracefully frees it at once")
	fs.StringVar(&o.node, "node", "", "this node's name, unique in the fleet (default: the host name)")
	fs.StringVar(&o.adminToken, "admin-token-file", "", "file holding the bearer token of the rules API; without one the API is not served")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "certificate file: serve HTTP and gRPC over TLS")
	fs.StringVar(&o.tlsKey, "tls-key", "", "key file of --tls-cert")
	fs.BoolVar(&o.shared, "shared-rules", false, "keep the rules in the fleet (in Redis with --redis, else over gossip): --config seeds them, the rules API changes them, every node follows them")
	fs.BoolVar(&o.headers, "response-headers", false, "add x-ratelimit-limit, -remaining and -reset to Envoy's responses")
	fs.DurationVar(&o.grace, "shutdown-grace", 10*time.Second, "how long shutdown waits for requests in flight")
	fs.DurationVar(&o.syncInterval, "sync-interval", 100*time.Millisecond, "how often a node reconciles with the fleet")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "HYBRIDLIMITD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := env(name); v != "" && !set[f.Name] && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", name, e)
			}
		}
	})
	switch {
	case err != nil:
		return nil, err
	case o.config == "" && len(o.envoy) == 0:
		return nil, errors.New("give --config (a rules file), --envoy-config (an envoyproxy/ratelimit configuration), or both")
	case o.gossipGrace <= 0:
		return nil, fmt.Errorf("--gossip-grace %v: give a positive duration (how long a silent member's share stays reserved)", o.gossipGrace)
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return nil, errors.New("--tls-cert and --tls-key go together")
	case o.gossipSeeds != "" && o.gossipBind == "":
		return nil, errors.New("--gossip-seeds needs --gossip-bind")
	case o.shared && (o.redis == "" && o.gossipBind == "" || o.config == ""):
		return nil, errors.New("--shared-rules needs a fleet (--redis or --gossip-bind) and --config (which seeds them)")
	}
	return o, nil
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	o, err := parse(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hybridlimitd:", err)
		fmt.Fprintln(os.Stderr, "run hybridlimitd -h for the flags; docs/server.md for the rest")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := start(ctx, o, logger)
	if err != nil {
		logger.Error("hybridlimitd: cannot start", "err", err)
		os.Exit(1)
	}
	<-ctx.Done()
	if err := s.shutdown(); err != nil {
		logger.Error("hybridlimitd: shutdown", "err", err)
		os.Exit(1)
	}
}
