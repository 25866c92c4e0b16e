package main

import (
	"cmp"
	"errors"
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
// flags, by flag name, leaving out (and not checking) the settings of
// flags already set. notes names the settings read and not needed.
func envoyFlags(env func(string) string, set map[string]bool) (flags map[string]string, notes []string, err error) {
	flags = map[string]string{}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	is := func(name string) bool {
		v := env(name)
		if v == "" {
			return false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			fail("%s %q: not a boolean", name, v)
		}
		return b
	}
	hostPort := func(flag, hostVar, portVar, port string) {
		if h, p := env(hostVar), env(portVar); (h != "" || p != "") && !set[flag] {
			flags[flag] = net.JoinHostPort(cmp.Or(h, "0.0.0.0"), cmp.Or(p, port))
		}
	}
	hostPort("http", "HOST", "PORT", "8080")
	hostPort("grpc", "GRPC_HOST", "GRPC_PORT", "8081")
	if u := env("GRPC_UDS"); u != "" && !set["grpc"] {
		fail("GRPC_UDS %q: hybridlimitd serves gRPC on TCP (GRPC_HOST, GRPC_PORT)", u)
	}
	if root, sub := env("RUNTIME_ROOT"), env("RUNTIME_SUBDIRECTORY"); (root != "" || sub != "") && !set["envoy-config"] {
		flags["envoy-config"] = filepath.Join(cmp.Or(root, "/srv/runtime_data/current"), sub, cmp.Or(env("RUNTIME_APPDIRECTORY"), "config"))
	}
	socket := env("REDIS_SOCKET_TYPE")
	if url := env("REDIS_URL"); (url != "" || socket != "") && !set["redis"] {
		switch {
		case !strings.EqualFold(cmp.Or(socket, "unix"), "tcp"):
			fail("REDIS_SOCKET_TYPE %q: hybridlimitd reaches Redis over TCP; set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port", cmp.Or(socket, "unix"))
		case url == "":
			fail("REDIS_SOCKET_TYPE tcp: REDIS_URL is empty; give it as host:port")
		case !strings.EqualFold(cmp.Or(env("REDIS_TYPE"), "single"), "single"):
			fail("REDIS_TYPE %q: hybridlimitd takes one Redis (REDIS_TYPE=SINGLE)", env("REDIS_TYPE"))
		case strings.Contains(url, ","):
			fail("REDIS_URL %q: hybridlimitd takes one Redis address", url)
		}
		flags["redis"] = url
	}
	if is("REDIS_TLS") && !set["redis-tls"] {
		flags["redis-tls"] = "true"
	}
	for _, name := range []string{"REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "QUOTA_MODE"} {
		if v := env(name); v != "" && v != "false" {
			fail("%s %q: not supported by hybridlimitd", name, v)
		}
	}
	if a := env("REDIS_AUTH"); a != "" && !set["redis-auth"] {
		flags["redis-auth"] = a
	}
	if b := env("BACKEND_TYPE"); b != "" && !strings.EqualFold(b, "redis") {
		fail("BACKEND_TYPE %q: hybridlimitd shares limits through Redis or gossip, not %s", b, b)
	}
	if is("REDIS_PERSECOND") {
		notes = append(notes, "REDIS_PERSECOND (per-second limits share the one Redis)")
	}
	if is("GRPC_SERVER_USE_TLS") && !set["tls-cert"] {
		cert, key := env("GRPC_SERVER_TLS_CERT"), env("GRPC_SERVER_TLS_KEY")
		switch {
		case env("GRPC_CLIENT_TLS_CACERT") != "":
			fail("GRPC_CLIENT_TLS_CACERT: hybridlimitd does not verify client certificates")
		case cert == "" || key == "":
			fail("GRPC_SERVER_USE_TLS: GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY are needed")
		}
		flags["tls-cert"], flags["tls-key"] = cert, key
	}
	if is("LIMIT_RESPONSE_HEADERS_ENABLED") && !set["response-headers"] {
		flags["response-headers"] = "true"
		// envoyproxy/ratelimit's names, the IETF draft's, unless given.
		for flag, v := range map[string]string{"limit-header": cmp.Or(env("LIMIT_LIMIT_HEADER"), "RateLimit-Limit"),
			"remaining-header": cmp.Or(env("LIMIT_REMAINING_HEADER"), "RateLimit-Remaining"),
			"reset-header":     cmp.Or(env("LIMIT_RESET_HEADER"), "RateLimit-Reset")} {
			if !set[flag] {
				flags[flag] = v
			}
		}
	}
	if is("SHADOW_MODE") && !set["shadow"] {
		flags["shadow"] = "true"
	}
	if is("MERGE_DOMAIN_CONFIG") && !set["merge-domains"] {
		flags["merge-domains"] = "true"
	}
	if lv := env("LOG_LEVEL"); lv != "" && !set["log-level"] {
		// envoyproxy/ratelimit's (logrus's) names for slog's levels.
		flags["log-level"] = map[string]string{"trace": "debug", "warning": "warn", "fatal": "error", "panic": "error"}[strings.ToLower(lv)]
		if flags["log-level"] == "" {
			flags["log-level"] = lv
		}
	}
	if c := env("CONFIG_TYPE"); c != "" && !strings.EqualFold(c, "file") {
		fail("CONFIG_TYPE %q: hybridlimitd reads its configuration from files (CONFIG_TYPE=FILE)", c)
	}
	for _, name := range []string{"USE_STATSD", "USE_DOG_STATSD", "USE_PROMETHEUS", "TRACING_ENABLED", "CACHE_KEY_PREFIX",
		"LOCAL_CACHE_SIZE_IN_BYTES", "NEAR_LIMIT_RATIO", "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_POOL_SIZE",
		"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"} {
		if env(name) != "" {
			notes = append(notes, name)
		}
	}
	slices.Sort(notes)
	return flags, notes, errors.Join(errs...)
}
