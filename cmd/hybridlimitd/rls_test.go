package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hybridlimit/hybridlimit/fleet"
	"github.com/hybridlimit/hybridlimit/gossip"
	"github.com/hybridlimit/hybridlimit/hybrid"
	hlrules "github.com/hybridlimit/hybridlimit/rules"
)

// rulesRequest is a rules request whose tenant and IP are s: what a
// client could send to the HTTP check to reach an Envoy limit's key.
func rulesRequest(s string) hlrules.Request { return hlrules.Request{Tenant: s, IP: s} }

// startRLS starts hybridlimitd with o (loopback ports) and returns a
// real gRPC client of its rate limit service.
func startRLS(t testing.TB, o *options) (rlspb.RateLimitServiceClient, *server) {
	t.Helper()
	o.httpAddr, o.grpcAddr, o.grace = "127.0.0.1:0", "127.0.0.1:0", time.Second
	if o.syncInterval == 0 {
		o.syncInterval = 100 * time.Millisecond
	}
	s, err := start(context.Background(), o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() {
		// The last node of a fleet cannot hand its leases back to a
		// fleet that has left: that, and only that, may fail.
		if err := s.shutdown(); err != nil && !errors.Is(err, fleet.ErrUnreachable) {
			t.Error(err)
		}
	})
	conn, err := grpc.NewClient(s.grpcAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn), s
}

// override is a request of one descriptor (to_number=1, messaging)
// whose limit is overridden to rpu a unit, times mult if not 0.
func override(rpu uint32, unit typepb.RateLimitUnit, mult uint32) *rlspb.RateLimitRequest {
	o := &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	if mult != 0 {
		o.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*commonpb.RateLimitDescriptor{{Entries: desc("to_number=1").Entries, Limit: o}}}
}

// desc is a descriptor of "key=value" entries.
func desc(entries ...string) *commonpb.RateLimitDescriptor {
	d := &commonpb.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &commonpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// codes is what the service answered for each of n requests like req.
func answers(t *testing.T, c rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest, n int) string {
	t.Helper()
	var b strings.Builder
	for range n {
		resp, err := c.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
		if resp.OverallCode == rlspb.RateLimitResponse_OK {
			b.WriteByte('.')
		} else {
			b.WriteByte('x')
		}
	}
	return b.String()
}

// TestEnvoyExamples: envoyproxy/ratelimit's documented configurations
// (docs/examples/envoy) are accepted, and a scripted sequence of requests
// gets the decisions envoyproxy/ratelimit gives it ('.' OK, 'x'
// OVER_LIMIT), over a real gRPC connection.
func TestEnvoyExamples(t *testing.T) {
	t.Parallel()
	c, _ := startRLS(t, &options{envoy: []string{"../../docs/examples/envoy"}})
	req := func(domain string, hits uint32, ds ...*commonpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
	}
	tests := []struct {
		name string
		req  *rlspb.RateLimitRequest
		n    int
		want string
	}{
		{"marketing to one number, 5 a day", req("messaging", 0, desc("message_type=marketing", "to_number=2061234567")), 7, ".....xx"},
		{"any message to another number, 100 a day", req("messaging", 0, desc("to_number=2061111111")), 3, "..."},
		{"a number's 100 a day, 40 at a time", req("messaging", 40, desc("to_number=2062222222")), 3, "..x"},
		{"a database with no limit configured", req("mongo_cps", 0, desc("database=logs")), 3, "..."},
		{"users, 500 a second, 200 at a time", req("mongo_cps", 200, desc("database=users")), 3, "..x"},
		{"a black-listed address", req("edge_proxy_per_ip", 0, desc("remote_address=50.0.0.5")), 2, "xx"},
		{"unlimited", req("rl", 0, desc("foo=anything")), 3, "..."},
		{"shadow mode: over, and admitted", req("rl", 0, desc("source_cluster=proxy", "destination_cluster=mock")), 4, "...."},
		{"replaced by account's 4 a minute", req("rl", 0, desc("source_cluster=proxy", "destination_cluster=bkthomps"), desc("category=account")), 6, "....xx"},
		{"more entries than the tree", req("mongo_cps", 0, desc("database=users", "table=t")), 2, ".."},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, answers(t, c, tt.req, tt.n), tt.name)
	}

	// 10 a second per address: all within one second, from its start.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
	assert.Equal(t, "..........x", answers(t, c, req("edge_proxy_per_ip", 0, desc("remote_address=10.0.0.1")), 11))

	resp, err := c.ShouldRateLimit(context.Background(), req("messaging", 0, desc("message_type=marketing", "to_number=2063333333")))
	require.NoError(t, err)
	st := resp.Statuses[0]
	assert.Equal(t, uint32(5), st.CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_DAY, st.CurrentLimit.Unit)
	assert.Equal(t, uint32(4), st.LimitRemaining)
}

// TestEnvoyAllOrNothing: a request over one descriptor's limit takes
// nothing from the others'.
func TestEnvoyAllOrNothing(t *testing.T) {
	t.Parallel()
	c, _ := startRLS(t, &options{envoy: []string{"../../docs/examples/envoy/messaging.yaml"}})
	both := &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*commonpb.RateLimitDescriptor{
		desc("message_type=marketing", "to_number=2064444444"), desc("to_number=2064444444")}}
	assert.Equal(t, ".....xxx", answers(t, c, both, 8))
	// The number's own limit spent 5 of its 100, not 8.
	one := &rlspb.RateLimitRequest{Domain: "messaging", HitsAddend: 95, Descriptors: []*commonpb.RateLimitDescriptor{desc("to_number=2064444444")}}
	assert.Equal(t, ".x", answers(t, c, one, 2))
}

// TestEnvoyBadRequests: what cannot be decided is an InvalidArgument,
// never an OK.
func TestEnvoyBadRequests(t *testing.T) {
	t.Parallel()
	c, _ := startRLS(t, &options{envoy: []string{"../../docs/examples/envoy"}})
	many := make([]*commonpb.RateLimitDescriptor, 65)
	for i := range many {
		many[i] = desc("to_number=1")
	}
	for _, tt := range []struct {
		name string
		req  *rlspb.RateLimitRequest
		want string
	}{
		{"no domain", &rlspb.RateLimitRequest{Descriptors: []*commonpb.RateLimitDescriptor{desc("a=b")}}, "the domain is empty"},
		{"unknown domain", &rlspb.RateLimitRequest{Domain: "nope", Descriptors: []*commonpb.RateLimitDescriptor{desc("a=b")}}, `unknown domain "nope"`},
		{"no descriptors", &rlspb.RateLimitRequest{Domain: "messaging"}, "the descriptor list is empty"},
		{"an empty descriptor", &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*commonpb.RateLimitDescriptor{{}}}, "has 0 entries"},
		{"an empty key", &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*commonpb.RateLimitDescriptor{desc("=x")}}, "empty key"},
		{"too many descriptors", &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: many}, "65 descriptors"},
		{"huge hits", &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*commonpb.RateLimitDescriptor{
			{Entries: desc("to_number=1").Entries, HitsAddend: wrapperspb.UInt64(1 << 40)}}}, "hits_addend 1099511627776"},
		{"a limit override with no fleet", override(1000, typepb.RateLimitUnit_SECOND, 0), "limit overrides need a fleet"},
		{"an override's unknown unit", override(10, 0, 0), "unit UNKNOWN"},
		{"an override's unit out of range", override(10, 99, 0), "unit 99"},
		{"an override no window holds whole", override(1, typepb.RateLimitUnit_YEAR, 2), "no whole number of requests"},
		{"an override past 2^31-1", override(1<<31, typepb.RateLimitUnit_SECOND, 0), "more than 2147483647"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tt.req)
		assert.Equal(t, codes.InvalidArgument, status.Code(err), tt.name)
		assert.ErrorContains(t, err, tt.want, tt.name)
	}
	// A cost beyond what the limit holds is over it, not an error.
	resp, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "messaging", HitsAddend: 1 << 30,
		Descriptors: []*commonpb.RateLimitDescriptor{desc("to_number=2")}})
	if assert.NoError(t, err) {
		assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	}
}

// TestEnvoyLimitOverride: a descriptor's limit override (a limit Envoy
// reads from the route or the request's metadata) is its limit on a
// fleet, whatever the configuration gives it, apart from the
// configuration's own state; an override in another unit is another
// limit; an override of 0 refuses; a changed override applies within an
// interval, keeping what was spent.
func TestEnvoyLimitOverride(t *testing.T) {
	t.Parallel()
	c, s := startRLS(t, &options{envoy: []string{"../../docs/examples/envoy"}, gossipBind: "127.0.0.1:0", gossipGrace: time.Second})
	// to_number=1 is 100 a day in the configuration; the override says 3
	// a minute. A new key: its first burst may wait for its first lease
	// (CI run 114 got ".xxxx"), so offered until 3 are admitted.
	require.Equal(t, 3, admitUntil(t, c, override(3, typepb.RateLimitUnit_MINUTE, 0), 3), "3 a minute")
	assert.Equal(t, "xx", answers(t, c, override(3, typepb.RateLimitUnit_MINUTE, 0), 2), "3 of 3 spent")
	resp, err := c.ShouldRateLimit(context.Background(), override(3, typepb.RateLimitUnit_MINUTE, 0))
	require.NoError(t, err)
	assert.Equal(t, uint32(3), resp.Statuses[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_MINUTE, resp.Statuses[0].CurrentLimit.Unit)
	assert.Equal(t, ".", answers(t, c, &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*commonpb.RateLimitDescriptor{desc("to_number=1")}}, 1),
		"without the override: the configuration's limit, its own state")
	assert.Equal(t, "x", answers(t, c, override(0, typepb.RateLimitUnit_SECOND, 0), 1), "0 a unit")
	// A new key too, whose first burst may wait for its first lease (CI
	// run 133 got ".x"); spent already, it would admit none.
	assert.Equal(t, 2, admitUntil(t, c, override(5, typepb.RateLimitUnit_HOUR, 0), 2), "another unit: another key")
	// Lowered from 12 to 9 a minute after 12 spent: the same key.
	perMinute := func(rpu uint32) *rlspb.RateLimitRequest {
		r := override(rpu, typepb.RateLimitUnit_MINUTE, 0)
		r.Descriptors[0].Entries = desc("to_number=3").Entries
		return r
	}
	require.Equal(t, 12, admitUntil(t, c, perMinute(12), 12), "12 a minute")
	time.Sleep(200 * time.Millisecond) // past a sync: the fleet's view, not the node's lease
	assert.Equal(t, "xxx", answers(t, c, perMinute(12), 3), "12 of 12 spent")
	assert.Equal(t, "x", answers(t, c, perMinute(9), 1), "lowered to 9: what was spent stays spent")
	every30s := override(4, typepb.RateLimitUnit_SECOND, 30)
	every30s.Descriptors[0].Entries = desc("to_number=2").Entries
	require.Equal(t, 4, admitUntil(t, c, every30s, 4), "4 per 30 s: a bucket of 4, 8 a minute")
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, "x", answers(t, c, every30s, 1), "4 of 4 spent")
	// Raised from 3 to 6 a minute: 3 more within an interval.
	_, err = c.ShouldRateLimit(context.Background(), override(6, typepb.RateLimitUnit_MINUTE, 0))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := s.limiter.AllowN(overridePrefix(typepb.RateLimitUnit_MINUTE)+keyOf([]entry{{"", "messaging"}, {"to_number", "1"}}), 0)
		return err == nil && d.Limit() == 6
	}, 5*time.Second, 10*time.Millisecond)
	// The raised lease may come with the next sync: offer until 3 are
	// admitted, then no more.
	require.Equal(t, 3, admitUntil(t, c, override(6, typepb.RateLimitUnit_MINUTE, 0), 3), "3 of 6 spent before the change: 3 more")
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, "x", answers(t, c, override(6, typepb.RateLimitUnit_MINUTE, 0), 1), "6 of 6 spent")
}

// admitUntil offers r until n are admitted, for at most 5 s, and
// returns how many were: a new key's first burst may wait for its first
// lease (its starter credit is its part of the burst over the largest
// fleet seen), and is never admitted past its limit.
func admitUntil(t *testing.T, c rlspb.RateLimitServiceClient, r *rlspb.RateLimitRequest, n int) int {
	t.Helper()
	got := ""
	for deadline := time.Now().Add(5 * time.Second); strings.Count(got, ".") < n && time.Now().Before(deadline); {
		if a := answers(t, c, r, 1); a == "x" {
			time.Sleep(20 * time.Millisecond)
		} else {
			got += a
		}
	}
	return strings.Count(got, ".")
}

// TestEnvoyOverrideFloodAndShadow: limit overrides past the key table's
// bound are over the limit, not an InvalidArgument (which Envoy lets
// through); in shadow mode (--shadow) an override of 0 is answered OK.
func TestEnvoyOverrideFloodAndShadow(t *testing.T) {
	t.Parallel()
	conf, err := loadEnvoy([]string{"../../docs/examples/envoy"}, false, false)
	require.NoError(t, err)
	g, err := gossip.New(gossip.Config{BindAddr: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close() })
	l, err := hybrid.New(hybrid.Config{Policies: conf.policies, Syncer: g, MaxKeys: 1})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	svc := &rls{l: l, conf: conf, fleet: true}
	ctx := context.Background()
	first := override(3, typepb.RateLimitUnit_MINUTE, 0)
	resp, err := svc.ShouldRateLimit(ctx, first)
	require.NoError(t, err)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.OverallCode)
	second := override(3, typepb.RateLimitUnit_MINUTE, 0)
	second.Descriptors[0].Entries = desc("to_number=2").Entries
	resp, err = svc.ShouldRateLimit(ctx, second)
	require.NoError(t, err, "a full table is over the limit, not an error")
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.OverallCode)

	c, _ := startRLS(t, &options{envoy: []string{"../../docs/examples/envoy"}, gossipBind: "127.0.0.1:0", gossipGrace: time.Second, shadow: true})
	assert.Equal(t, "..", answers(t, c, override(0, typepb.RateLimitUnit_SECOND, 0), 2), "0 a unit, in shadow mode")
}

// TestOverrideLimit: an override's rate is decided under the first
// template whose window it fills with a whole number of requests.
func TestOverrideLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rpu        uint32
		unit       typepb.RateLimitUnit
		mult       uint32
		tmpl       typepb.RateLimitUnit
		per        int64
		impossible bool
	}{
		{rpu: 3, unit: typepb.RateLimitUnit_MINUTE, tmpl: typepb.RateLimitUnit_MINUTE, per: 3},
		{rpu: 120, unit: typepb.RateLimitUnit_MINUTE, tmpl: typepb.RateLimitUnit_MINUTE, per: 120}, // by the period alone
		{rpu: 90, unit: typepb.RateLimitUnit_MINUTE, tmpl: typepb.RateLimitUnit_MINUTE, per: 90},
		{rpu: 7, unit: typepb.RateLimitUnit_SECOND, mult: 7, tmpl: typepb.RateLimitUnit_SECOND, per: 1}, // no window is whole periods
		{rpu: 10, unit: typepb.RateLimitUnit_SECOND, mult: 30, tmpl: typepb.RateLimitUnit_MINUTE, per: 20},
		{rpu: 7, unit: typepb.RateLimitUnit_SECOND, mult: 45, tmpl: typepb.RateLimitUnit_HOUR, per: 560},
		{rpu: 5, unit: typepb.RateLimitUnit_DAY, mult: 1, tmpl: typepb.RateLimitUnit_DAY, per: 5},
		{rpu: 1, unit: typepb.RateLimitUnit_YEAR, mult: 2, impossible: true},
		{rpu: 1<<31 - 1, unit: typepb.RateLimitUnit_SECOND, mult: 1<<32 - 1, impossible: true},
	} {
		tmpl, per, ok := overrideLimit(tt.rpu, tt.unit, tt.mult)
		assert.Equal(t, !tt.impossible, ok, "%+v", tt)
		if ok {
			assert.Equal(t, tt.tmpl, tmpl, "%+v", tt)
			assert.Equal(t, tt.per, per, "%+v", tt)
		}
	}
}

// TestEnvoyConfigRefused: configurations envoyproxy/ratelimit refuses
// are refused, naming the file and what is wrong.
func TestEnvoyConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ file, want string }{
		{"descriptors: []\n", "the domain is empty"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `unit "fortnight"`},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "takes no unit"},
		{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", `"d.a" is given twice`},
		{"domain: d\ndescriptors:\n  - value: a\n", "empty key"},
		{"domain: d\ndescriptor:\n  - key: a\n", "field descriptor not found"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n", "names its own"},
	} {
		c := &envoyConfig{domains: map[string]*node{}}
		assert.ErrorContains(t, c.add("f.yaml", []byte(tt.file)), tt.want, tt.file)
	}
}

// TestEnvoyHostile: a padded descriptor value is limited, not an error
// (which Envoy lets through); a shadow limit of 0 a unit answers OK; and
// a rule of the rules file, or the rules API, cannot reach the Envoy
// limits' keys or names.
func TestEnvoyHostile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(`domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
`), 0o600))
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	require.NoError(t, os.WriteFile(rules, []byte("rules:\n  - {name: rls0, key: [tenant], limit: 1000, window: 1h}\n  - {name: d.remote_address, key: [ip], limit: 1000, window: 1h}\n"), 0o600))
	c, s := startRLS(t, &options{envoy: []string{dir}, config: rules})
	padded := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{desc("remote_address=" + strings.Repeat("a", 300))}}
	assert.Equal(t, "..xx", answers(t, c, padded, 4), "limited like any other value")
	shadow := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{desc("shadowed=x")}}
	assert.Equal(t, "..", answers(t, c, shadow, 2))
	victim := &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*commonpb.RateLimitDescriptor{desc("remote_address=9.9.9.9")}}
	for range 5 {
		_, err := s.rules.Allow(rulesRequest("remote_address=9.9.9.9"))
		require.NoError(t, err)
	}
	assert.Equal(t, "..xx", answers(t, c, victim, 4), "the rules' policies are not the Envoy limits'")
}
