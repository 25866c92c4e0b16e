package main

import (
	"cmp"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// envoyproxy/ratelimit is configured by environment variables; a
// deployment of it (a Kubernetes manifest, a Compose file) runs
// hybridlimitd unchanged: each of its settings that hybridlimitd has a
// flag for fills that flag, unless the flag or its HYBRIDLIMITD_ variable
// is set. A setting hybridlimitd cannot honour as asked (a Redis Cluster,
// a Unix socket, mutual TLS) is an error naming it, never ignored; one
// that does not change decisions (statsd, tracing, pool sizes) is named
// in a log line at start. docs/server.md, "Migrating", has the table.

// envoyFlags maps envoyproxy/ratelimit's environment to hybridlimitd's
// flags, by flag name. notes names the settings read and not used.
func envoyFlags(env func(string) string) (flags map[string]string, notes []string, err error) {
	flags = map[string]string{}
	is := func(name string) bool { v, _ := strconv.ParseBool(env(name)); return v }
	hostPort := func(flag, hostVar, portVar, port string) {
		if h, p := env(hostVar), env(portVar); h != "" || p != "" {
			flags[flag] = net.JoinHostPort(cmp.Or(h, "0.0.0.0"), cmp.Or(p, port))
		}
	}
	hostPort("http", "HOST", "PORT", "8080")
	hostPort("grpc", "GRPC_HOST", "GRPC_PORT", "8081")
	if root, sub := env("RUNTIME_ROOT"), env("RUNTIME_SUBDIRECTORY"); root != "" || sub != "" {
		flags["envoy-config"] = filepath.Join(cmp.Or(root, "/srv/runtime_data/current"), sub, cmp.Or(env("RUNTIME_APPDIRECTORY"), "config"))
	}
	if url := env("REDIS_URL"); url != "" {
		switch {
		case !strings.EqualFold(cmp.Or(env("REDIS_SOCKET_TYPE"), "unix"), "tcp"):
			return nil, nil, fmt.Errorf("REDIS_SOCKET_TYPE %q: hybridlimitd reaches Redis over TCP; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port", cmp.Or(env("REDIS_SOCKET_TYPE"), "unix"))
		case !strings.EqualFold(cmp.Or(env("REDIS_TYPE"), "single"), "single"):
			return nil, nil, fmt.Errorf("REDIS_TYPE %q: hybridlimitd takes one Redis (REDIS_TYPE=SINGLE)", env("REDIS_TYPE"))
		case strings.Contains(url, ","):
			return nil, nil, fmt.Errorf("REDIS_URL %q: hybridlimitd takes one Redis address", url)
		}
		flags["redis"] = url
		if is("REDIS_TLS") {
			flags["redis-tls"] = "true"
		}
	}
	if b := env("BACKEND_TYPE"); b != "" && !strings.EqualFold(b, "redis") {
		return nil, nil, fmt.Errorf("BACKEND_TYPE %q: hybridlimitd shares limits through Redis or gossip, not %s", b, b)
	}
	if is("REDIS_PERSECOND") {
		notes = append(notes, "REDIS_PERSECOND (per-second limits share the one Redis)")
	}
	if is("GRPC_SERVER_USE_TLS") {
		if env("GRPC_CLIENT_TLS_CACERT") != "" {
			return nil, nil, fmt.Errorf("GRPC_CLIENT_TLS_CACERT: hybridlimitd does not verify client certificates")
		}
		flags["tls-cert"], flags["tls-key"] = env("GRPC_SERVER_TLS_CERT"), env("GRPC_SERVER_TLS_KEY")
	}
	if is("LIMIT_RESPONSE_HEADERS_ENABLED") {
		flags["response-headers"] = "true"
		// envoyproxy/ratelimit's names, the IETF draft's, unless given.
		flags["limit-header"] = cmp.Or(env("LIMIT_LIMIT_HEADER"), "RateLimit-Limit")
		flags["remaining-header"] = cmp.Or(env("LIMIT_REMAINING_HEADER"), "RateLimit-Remaining")
		flags["reset-header"] = cmp.Or(env("LIMIT_RESET_HEADER"), "RateLimit-Reset")
	}
	if is("SHADOW_MODE") {
		flags["shadow"] = "true"
	}
	if is("MERGE_DOMAIN_CONFIG") {
		flags["merge-domains"] = "true"
	}
	if lv := env("LOG_LEVEL"); lv != "" {
		flags["log-level"] = lv
	}
	if c := env("CONFIG_TYPE"); c != "" && !strings.EqualFold(c, "file") {
		return nil, nil, fmt.Errorf("CONFIG_TYPE %q: hybridlimitd reads its configuration from files (CONFIG_TYPE=FILE)", c)
	}
	if a := env("REDIS_AUTH"); a != "" {
		flags["redis-auth"] = a
	}
	for _, name := range []string{"USE_STATSD", "USE_DOG_STATSD", "USE_PROMETHEUS", "TRACING_ENABLED", "CACHE_KEY_PREFIX",
		"LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_POOL_SIZE",
		"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"} {
		if env(name) != "" {
			notes = append(notes, name)
		}
	}
	slices.Sort(notes)
	return flags, notes, nil
}
