package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envOf is an environment of vars, as "NAME", "value" pairs.
func envOf(vars ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(vars); i += 2 {
		m[vars[i]] = vars[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestEnvoyEnvironment: envoyproxy/ratelimit's environment fills the
// flags it stands for, after the flags and their HYBRIDLIMITD_
// variables; what hybridlimitd cannot honour is an error naming the
// setting; what it does not need is named in notes.
func TestEnvoyEnvironment(t *testing.T) {
	t.Parallel()
	deployment := []string{ // as envoyproxy/ratelimit's own docker-compose and Kubernetes examples set it
		"USE_STATSD", "false", "LOG_LEVEL", "debug", "REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "redis:6379",
		"RUNTIME_ROOT", "/data", "RUNTIME_SUBDIRECTORY", "ratelimit", "RUNTIME_WATCH_ROOT", "false",
		"PORT", "8080", "GRPC_PORT", "8081", "LIMIT_RESPONSE_HEADERS_ENABLED", "true", "SHADOW_MODE", "true",
		"REDIS_AUTH", "user:secret", "REDIS_TLS", "true", "MERGE_DOMAIN_CONFIG", "true",
	}
	o, err := parse(nil, envOf(deployment...), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "redis:6379", o.redis)
	assert.Equal(t, []string{"/data/ratelimit/config"}, o.envoy)
	assert.Equal(t, slog.LevelDebug, o.logLevel)
	assert.Equal(t, "0.0.0.0:8080", o.httpAddr)
	assert.Equal(t, "0.0.0.0:8081", o.grpcAddr)
	assert.True(t, o.headers)
	assert.Equal(t, [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}, o.headerNames, "envoyproxy/ratelimit's names")
	assert.True(t, o.shadow)
	assert.True(t, o.mergeDomains)
	assert.True(t, o.redisTLS)
	assert.Equal(t, "user:secret", o.redisAuth)
	assert.Equal(t, []string{"USE_STATSD"}, o.notes)

	o, err = parse([]string{"--redis", "flag:1", "--limit-header", "X-Limit"}, envOf(append(deployment, "HYBRIDLIMITD_GRPC", ":9")...), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "flag:1", o.redis, "a flag wins")
	assert.Equal(t, ":9", o.grpcAddr, "then HYBRIDLIMITD_")
	assert.Equal(t, "X-Limit", o.headerNames[0])
	assert.Equal(t, "RateLimit-Remaining", o.headerNames[1])

	o, err = parse([]string{"--config", "r"}, envOf(), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, [3]string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}, o.headerNames, "hybridlimitd's own")
	assert.Equal(t, slog.LevelInfo, o.logLevel)

	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock"}, `REDIS_SOCKET_TYPE "unix"`},
		{[]string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "a:1", "REDIS_TYPE", "cluster"}, `REDIS_TYPE "cluster"`},
		{[]string{"REDIS_SOCKET_TYPE", "tcp", "REDIS_URL", "a:1,b:2"}, "one Redis address"},
		{[]string{"BACKEND_TYPE", "memcache"}, `BACKEND_TYPE "memcache"`},
		{[]string{"GRPC_SERVER_USE_TLS", "true", "GRPC_CLIENT_TLS_CACERT", "ca.pem"}, "GRPC_CLIENT_TLS_CACERT"},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_SOTW"}, `CONFIG_TYPE "GRPC_XDS_SOTW"`},
		{[]string{"LOG_LEVEL", "loud", "RUNTIME_ROOT", "/data"}, "--log-level"},
		{[]string{"GRPC_UDS", "/tmp/rl.sock", "RUNTIME_ROOT", "/data"}, "GRPC_UDS"},
		{[]string{"QUOTA_MODE", "true", "RUNTIME_ROOT", "/data"}, "QUOTA_MODE"},
		{[]string{"REDIS_TLS_CACERT", "ca.pem", "RUNTIME_ROOT", "/data"}, "REDIS_TLS_CACERT"},
		{[]string{"REDIS_SOCKET_TYPE", "tcp", "RUNTIME_ROOT", "/data"}, "REDIS_URL is empty"},
		{[]string{"GRPC_SERVER_USE_TLS", "true", "RUNTIME_ROOT", "/data"}, "GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY are needed"},
		{[]string{"REDIS_TLS", "yes", "RUNTIME_ROOT", "/data"}, `REDIS_TLS "yes": not a boolean`},
		{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_LIMIT_HEADER", "X-Limit\r\nSet-Cookie: a=b", "RUNTIME_ROOT", "/data"}, "not a header name"},
		{[]string{"LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_RESET_HEADER", "x reset", "RUNTIME_ROOT", "/data"}, "not a header name"},
	} {
		_, err := parse(nil, envOf(tt.env...), io.Discard)
		assert.ErrorContains(t, err, tt.want, "%v", tt.env)
	}
	// A setting a flag overrides is neither used nor checked.
	o, err = parse([]string{"--redis", "r:1", "--config", "c"}, envOf("REDIS_URL", "/var/run/nutcracker/ratelimit.sock"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "r:1", o.redis)
	// logrus's level names, as envoyproxy/ratelimit takes them.
	for lv, want := range map[string]slog.Level{"warning": slog.LevelWarn, "trace": slog.LevelDebug, "ERROR": slog.LevelError, "fatal": slog.LevelError} {
		o, err := parse([]string{"--config", "c"}, envOf("LOG_LEVEL", lv), io.Discard)
		require.NoError(t, err, lv)
		assert.Equal(t, want, o.logLevel, lv)
	}
}

// TestEnvoyEnvironmentServes: a server started from envoyproxy/ratelimit's
// environment alone serves its configuration directory, with its
// response header names, and, in SHADOW_MODE, answers OK where it would
// refuse, counting what it would have refused.
func TestEnvoyEnvironmentServes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	data, err := os.ReadFile("../../docs/examples/envoy/messaging.yaml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "messaging.yaml"), data, 0o600))
	for _, shadow := range []string{"false", "true"} {
		o, err := parse(nil, envOf("RUNTIME_ROOT", root, "RUNTIME_SUBDIRECTORY", "ratelimit",
			"LIMIT_RESPONSE_HEADERS_ENABLED", "true", "SHADOW_MODE", shadow), io.Discard)
		require.NoError(t, err)
		c, s := startRLS(t, o)
		req := &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*commonpb.RateLimitDescriptor{desc("message_type=marketing", "to_number=2061234567")}}
		resp, err := c.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
		require.Len(t, resp.ResponseHeadersToAdd, 3)
		assert.Equal(t, "RateLimit-Limit", resp.ResponseHeadersToAdd[0].Key)
		assert.Equal(t, "5", resp.ResponseHeadersToAdd[0].Value)
		assert.Equal(t, "RateLimit-Remaining", resp.ResponseHeadersToAdd[1].Key)
		want := "....x"
		if shadow == "true" {
			want = "....."
		}
		assert.Equal(t, want, answers(t, c, req, 5), "shadow %s: 5 a day, one taken", shadow)
		if shadow == "true" {
			st := s.limiter.Stats().Policies
			var shadowed uint64
			for _, p := range st {
				shadowed += p.Shadowed
			}
			assert.NotZero(t, shadowed, "counted as it would have refused")
		}
	}
}
