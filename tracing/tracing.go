// Package tracing makes OpenTelemetry spans of what a hybrid.Limiter does
// on the network: a span for each sync round ("hybridlimit.sync", with
// the keys it carries) and for each Strict decision ("hybridlimit.strict",
// a child of the caller's span, with the policy and the cost). Hybrid and
// Local decisions, made in memory, are not traced.
//
// It is a package of its own so that the core packages do not depend on
// OpenTelemetry:
//
//	l, err := hybrid.New(hybrid.Config{..., Tracer: tracing.New(otel.GetTracerProvider())})
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hybridlimit/hybridlimit/hybrid"
)

// Name is the instrumentation scope the spans are made in.
const Name = "github.com/hybridlimit/hybridlimit"

// tracer is a hybrid.Tracer over an OpenTelemetry Tracer.
type tracer struct{ t trace.Tracer }

var _ hybrid.Tracer = tracer{}

// New returns a hybrid.Tracer that makes spans with tp's Tracer named
// Name. It is safe for concurrent use.
func New(tp trace.TracerProvider) hybrid.Tracer {
	return tracer{tp.Tracer(Name)}
}

// Start begins a span for op; the func it returns ends it, recording the
// error, if any, as the span's status.
func (t tracer) Start(ctx context.Context, op, policy string, n int) (context.Context, func(error)) {
	var attrs []attribute.KeyValue
	switch op {
	case "sync":
		attrs = []attribute.KeyValue{attribute.Int("hybridlimit.keys", n)}
	default:
		attrs = []attribute.KeyValue{attribute.String("hybridlimit.policy", policy), attribute.Int("hybridlimit.cost", n)}
	}
	kind := trace.SpanKindInternal
	if op == "strict" {
		kind = trace.SpanKindClient
	}
	ctx, span := t.t.Start(ctx, "hybridlimit."+op, trace.WithAttributes(attrs...), trace.WithSpanKind(kind))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
