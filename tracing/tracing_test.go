package tracing_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/hybridlimit/hybridlimit/global"
	"github.com/hybridlimit/hybridlimit/hybrid"
	"github.com/hybridlimit/hybridlimit/internal/testkit/redistest"
	"github.com/hybridlimit/hybridlimit/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSpans: a Limiter on a real Redis, traced into an in-memory
// recorder. A sync round is a span with its keys; a Strict decision is a
// child of the caller's span with its policy and cost; a Hybrid decision
// makes none; a Strict decision the store could not answer records the
// error.
func TestSpans(t *testing.T) {
	srv := redistest.StartServer(t)
	store, err := global.NewRedis(context.Background(), global.RedisConfig{Client: srv.DeadlineClient(t)})
	require.NoError(t, err)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	l, err := hybrid.New(hybrid.Config{Node: "n1", Syncer: store, ManualSync: true, Tracer: tracing.New(tp),
		Policies: []hybrid.Policy{
			{Name: "api", Limit: 100, Window: time.Second},
			{Name: "login", Prefix: "login:", Mode: hybrid.Strict, Limit: 5, Window: time.Minute},
		}})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })

	for range 3 {
		_, err := l.Allow("tenant")
		require.NoError(t, err)
	}
	assert.Empty(t, rec.Ended(), "Hybrid decisions make no span")
	require.NoError(t, l.SyncOnce(context.Background()))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	_, err = l.AllowNContext(ctx, "login:192.0.2.1", 2)
	require.NoError(t, err)
	parent.End()

	spans := rec.Ended()
	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = s
	}
	sync, strict := byName["hybridlimit.sync"], byName["hybridlimit.strict"]
	require.NotNil(t, sync, "a sync round's span")
	require.NotNil(t, strict, "a Strict decision's span")
	assert.Contains(t, sync.Attributes(), attribute.Int("hybridlimit.keys", 1))
	assert.Equal(t, codes.Unset, sync.Status().Code)
	assert.Equal(t, parent.SpanContext().SpanID(), strict.Parent().SpanID(), "a child of the caller's span")
	assert.Contains(t, strict.Attributes(), attribute.String("hybridlimit.policy", "login"))
	assert.Contains(t, strict.Attributes(), attribute.Int("hybridlimit.cost", 2))
	for _, a := range strict.Attributes() {
		assert.NotContains(t, a.Value.String(), "192.0.2.1", "no key in a span")
	}

	srv.Kill()
	_, err = l.AllowNContext(context.Background(), "login:192.0.2.1", 1)
	require.NoError(t, err, "the FailMode decides; the span has the error")
	spans = rec.Ended()
	last := spans[len(spans)-1]
	assert.Equal(t, "hybridlimit.strict", last.Name())
	assert.Equal(t, codes.Error, last.Status().Code)
}
