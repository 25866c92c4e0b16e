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
// HYBRIDLIMITD_REDIS; envoyproxy/ratelimit's own variables (REDIS_URL,
// RUNTIME_ROOT, ...) are read as well. docs/server.md has the rest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
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
	headerNames  [3]string // limit, remaining, reset
	shadow       bool      // every Envoy limit in shadow mode
	mergeDomains bool      // a domain in several files is one
	redisTLS     bool
	redisAuth    string // password, or user:password
	logLevel     slog.Level
	notes        []string // envoyproxy/ratelimit settings read and not used
	shared       bool     // the rules live in the fleet
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
	fs.BoolVar(&o.headers, "response-headers", false, "add the limit, remaining and reset headers of the descriptor nearest its limit to Envoy's responses")
	fs.StringVar(&o.headerNames[0], "limit-header", "x-ratelimit-limit", "name of the limit header (--response-headers)")
	fs.StringVar(&o.headerNames[1], "remaining-header", "x-ratelimit-remaining", "name of the remaining header (--response-headers)")
	fs.StringVar(&o.headerNames[2], "reset-header", "x-ratelimit-reset", "name of the reset header, in seconds (--response-headers)")
	fs.BoolVar(&o.shadow, "shadow", false, "decide and count every Envoy limit, but answer OK (shadow_mode for all)")
	fs.BoolVar(&o.mergeDomains, "merge-domains", false, "merge the descriptors of a domain given in several Envoy configuration files")
	fs.BoolVar(&o.redisTLS, "redis-tls", false, "reach Redis over TLS")
	fs.StringVar(&o.redisAuth, "redis-auth", "", "Redis password, or user:password (prefer the environment: HYBRIDLIMITD_REDIS_AUTH)")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "least level logged: debug, info, warn or error")
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
			set[f.Name] = true
		}
	})
	if err != nil {
		return nil, err
	}
	envoy, notes, err := envoyFlags(env, set) // envoyproxy/ratelimit's settings (envoyenv.go)
	if err != nil {
		return nil, fmt.Errorf("envoyproxy/ratelimit setting %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(envoy)) {
		if !set[name] {
			if e := fs.Set(name, envoy[name]); e != nil {
				return nil, fmt.Errorf("envoyproxy/ratelimit setting for --%s: %w", name, e)
			}
		}
	}
	o.notes = notes
	switch {
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
	for i, flag := range []string{"limit-header", "remaining-header", "reset-header"} {
		if !httpguts.ValidHeaderFieldName(o.headerNames[i]) { // it goes to Envoy, which adds it to responses
			return nil, fmt.Errorf("--%s %q: not a header name", flag, o.headerNames[i])
		}
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hybridlimitd:", err)
		fmt.Fprintln(os.Stderr, "run hybridlimitd -h for the flags; docs/server.md for the rest")
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: o.logLevel}))
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
