package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/hybridlimit/hybridlimit/admin"
	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/metrics"
	"github.com/hybridlimit/hybridlimit/metrics/gossipmetrics"
	"github.com/hybridlimit/hybridlimit/partition"
	"github.com/hybridlimit/hybridlimit/rules"
)

// server is a running hybridlimitd.
type server struct {
	log        *slog.Logger
	limiter    *hybrid.Limiter
	rules      *rules.Limiter // nil without --config
	gossip     *gossip.Gossip // nil without --gossip-bind
	redis      *redis.Client  // nil without --redis
	redisCount *redisCounter  // counts what redis sends, for /metrics
	store      rules.Store    // the fleet's rules, with --shared-rules
	http       *http.Server
	grpc       *grpc.Server // nil without --envoy-config
	httpAddr   net.Addr
	grpcAddr   net.Addr // nil without --envoy-config
	fleetish   bool     // some fleet is configured
	stopping   atomic.Bool
	cancel     context.CancelFunc
	grace      time.Duration
	once       sync.Once
	done       error          // shutdown's
	loops      sync.WaitGroup // Follow, Watch
}

// start builds and starts a server for o; the servers run until
// shutdown.
func start(ctx context.Context, o *options, logger *slog.Logger) (*server, error) {
	s := &server{log: logger, grace: o.grace}
	var set *rules.Set
	var conf *envoyConfig
	var err error
	var policies []hybrid.Policy
	if o.config != "" {
		if set, err = rules.Load(o.config); err != nil {
			return nil, err
		}
		policies = append(policies, set.Policies()...)
	}
	if len(o.notes) > 0 {
		logger.Info("hybridlimitd: envoyproxy/ratelimit settings read and not needed", "settings", o.notes)
	}
	if len(o.envoy) > 0 {
		if conf, err = loadEnvoy(o.envoy, o.shadow, o.mergeDomains); err != nil {
			return nil, err
		}
		policies = append(policies, conf.policies...)
	}
	syncer, failover, err := s.fleets(ctx, o)
	if err != nil {
		return nil, err
	}
	s.fleetish = syncer != nil
	if !s.fleetish {
		logger.Warn("hybridlimitd: no --redis nor --gossip-bind: each node limits alone (Local mode), and the rules file is not watched")
		policies = localOnly(policies)
	}
	if len(policies) == 0 {
		return nil, errors.New("the configuration holds no limit")
	}
	s.limiter, err = hybrid.New(hybrid.Config{Node: o.node, Policies: policies, Syncer: syncer, Failover: failover,
		Interval: o.syncInterval, Logger: logger})
	if err != nil {
		s.closeFleets()
		return nil, err
	}
	if set != nil {
		if !s.fleetish {
			if set, err = localSet(set); err != nil {
				s.close()
				return nil, err
			}
		}
		if s.rules, err = rules.New(s.limiter, set); err != nil {
			s.close()
			return nil, err
		}
	}
	var tlsConf *tls.Config
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			s.close()
			return nil, err
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	// Each server gets its own copy: net/http's ServeTLS writes its
	// protocols into the one it is given while gRPC reads it (a race
	// TestTLS found).
	if err := s.serveHTTP(o, tlsConf.Clone()); err != nil {
		s.close()
		return nil, err
	}
	if conf != nil {
		if err := s.serveGRPC(o, conf, tlsConf.Clone()); err != nil {
			s.close()
			return nil, err
		}
	}
	wctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	switch {
	case s.store != nil:
		s.loops.Go(func() { _ = s.rules.Follow(wctx, s.store, 250*time.Millisecond, logger) })
	case s.rules != nil && s.fleetish:
		s.loops.Go(func() { _ = s.rules.Watch(wctx, o.config, time.Second, logger) })
	}
	logger.Info("hybridlimitd: serving", "http", s.httpAddr, "grpc", s.grpcAddr, "policies", len(policies))
	return s, nil
}

// fleets makes the Syncer and Failover o asks for.
func (s *server) fleets(ctx context.Context, o *options) (syncer, failover fleet.Syncer, err error) {
	if o.redis != "" {
		opts := &redis.Options{Addr: o.redis, ContextTimeoutEnabled: true, Password: o.redisAuth}
		if user, pass, ok := strings.Cut(o.redisAuth, ":"); ok {
			opts.Username, opts.Password = user, pass
		}
		if o.redisTLS {
			host, _, _ := net.SplitHostPort(o.redis)
			opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
		}
		s.redis = redis.NewClient(opts)
		s.redisCount = &redisCounter{}
		s.redis.AddHook(s.redisCount)
		r, err := global.NewRedis(ctx, global.RedisConfig{Client: s.redis})
		if err != nil {
			s.redis.Close()
			return nil, nil, err
		}
		syncer = r
		if o.shared {
			s.store = r.Document("rules")
		}
	}
	if o.gossipBind != "" {
		host, port, err := net.SplitHostPort(o.gossipBind)
		if err != nil {
			s.closeFleets()
			return nil, nil, fmt.Errorf("--gossip-bind: %w", err)
		}
		var p int
		if _, err := fmt.Sscan(port, &p); err != nil {
			s.closeFleets()
			return nil, nil, fmt.Errorf("--gossip-bind: port %q", port)
		}
		cfg := gossip.Config{Name: o.node, BindAddr: host, BindPort: p, Grace: o.gossipGrace}
		if o.gossipSeeds != "" {
			cfg.Seeds = splitList(o.gossipSeeds)
		}
		if o.gossipKey != "" {
			key, err := os.ReadFile(o.gossipKey)
			if err != nil {
				s.closeFleets()
				return nil, nil, err
			}
			cfg.SecretKey = bytes.TrimSpace(key)
		}
		if s.gossip, err = gossip.New(cfg); err != nil {
			s.closeFleets()
			return nil, nil, err
		}
		if o.node == "" {
			o.node = s.gossip.Name()
		}
		if syncer == nil {
			syncer = s.gossip
			if o.shared {
				s.store = s.gossip.Document("rules")
			}
		} else {
			failover = s.gossip
		}
	}
	return syncer, failover, nil
}

// serveHTTP starts the HTTP server: the rate check and the rules API (with
// --config), /metrics, /healthz (and envoyproxy/ratelimit's /healthcheck)
// and /readyz.
func (s *server) serveHTTP(o *options, tlsConf *tls.Config) error {
	mux := http.NewServeMux()
	if s.rules != nil {
		mux.Handle("/v1/check", admin.Check(s.rules))
		if o.adminToken != "" {
			token, err := os.ReadFile(o.adminToken)
			if err != nil {
				return err
			}
			want := []byte("Bearer " + string(bytes.TrimSpace(token)))
			api, err := admin.New(admin.Config{Rules: s.rules, Authorize: func(r *http.Request) error {
				if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
					return errors.New("a valid bearer token is required")
				}
				return nil
			}, Store: s.store, OnChange: func([]byte) { s.log.Info("hybridlimitd: rules changed through the API") }})
			if err != nil {
				return err
			}
			mux.Handle("/admin/", api)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(s.limiter))
	if s.gossip != nil {
		reg.MustRegister(gossipmetrics.NewCollector(s.gossip))
	}
	if s.redisCount != nil {
		reg.MustRegister(s.redisCount.collectors()...)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	healthz := func(w http.ResponseWriter, _ *http.Request) {
		if s.stopping.Load() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
	mux.HandleFunc("/healthz", healthz)
	mux.HandleFunc("/healthcheck", healthz) // envoyproxy/ratelimit's, which its manifests probe
	mux.HandleFunc("/readyz", s.ready)
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return err
	}
	s.httpAddr = ln.Addr()
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, TLSConfig: tlsConf}
	go func() {
		var err error
		if tlsConf != nil {
			err = s.http.ServeTLS(ln, "", "")
		} else {
			err = s.http.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("hybridlimitd: HTTP server", "err", err)
		}
	}()
	return nil
}

// ready answers /readyz: ready while the node is in touch with its fleet
// (or has none), not while it starts or stops.
func (s *server) ready(w http.ResponseWriter, _ *http.Request) {
	h := s.limiter.Health()
	switch {
	case s.stopping.Load():
		http.Error(w, "stopping", http.StatusServiceUnavailable)
	case s.fleetish && (h.Level != partition.Healthy || s.limiter.Stats().Rounds == 0):
		http.Error(w, fmt.Sprintf("not in touch with the fleet: %v", h.Level), http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ready")
	}
}

// serveGRPC starts the Envoy rate limit service.
func (s *server) serveGRPC(o *options, conf *envoyConfig, tlsConf *tls.Config) error {
	var opts []grpc.ServerOption
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	s.grpc = grpc.NewServer(opts...)
	svc := &rls{l: s.limiter, conf: conf, peek: !s.fleetish, fleet: s.fleetish}
	if o.headers {
		svc.headers = &o.headerNames
	}
	rlspb.RegisterRateLimitServiceServer(s.grpc, svc)
	ln, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return err
	}
	s.grpcAddr = ln.Addr()
	go func() {
		if err := s.grpc.Serve(ln); err != nil {
			s.log.Error("hybridlimitd: gRPC server", "err", err)
		}
	}()
	return nil
}

// shutdown stops taking requests (readyz fails first), waits up to the
// grace for those in flight, hands the leases back and leaves the fleet.
func (s *server) shutdown() error {
	s.once.Do(func() { s.done = s.stop() })
	return s.done
}

func (s *server) stop() error {
	s.stopping.Store(true)
	// A third of the grace (at most 5 s) with /readyz failing and the
	// listeners open, for load balancers and Envoy to see it and send
	// elsewhere: closed at once, they meet refused connections, which
	// Envoy lets through by default.
	time.Sleep(min(s.grace/3, 5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), s.grace)
	defer cancel()
	var errs []error
	if s.grpc != nil {
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
		}
	}
	if err := s.http.Shutdown(ctx); err != nil {
		errs = append(errs, err, s.http.Close()) // handlers still running: cut them before the limiter closes
	}
	errs = append(errs, s.close())
	return errors.Join(errs...)
}

// close closes the limiter, handing its leases back, then the fleets.
func (s *server) close() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.loops.Wait() // no Apply on a closed limiter
	var err error
	if s.limiter != nil {
		err = s.limiter.Close()
	}
	return errors.Join(err, s.closeFleets())
}

func (s *server) closeFleets() error {
	var errs []error
	if s.gossip != nil {
		errs = append(errs, s.gossip.Close())
	}
	if s.redis != nil {
		errs = append(errs, s.redis.Close())
	}
	return errors.Join(errs...)
}
