package queue

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/throttle"
)

// Traces (OpenTelemetry), off unless Config.TracerProvider is set. A job
// is traced as:
//
//	sluice.enqueue                the Producer's Enqueue (admission and the bound)
//	└─ sluice.job                 one hand-over's run, from its enqueue (or put-back) to done
//	   ├─ sluice.waiting_room     from due to the worker's start (first hand-over)
//	   ├─ sluice.slot             the wait for the downstream's slot
//	   ├─ sluice.lease            the wait for a concurrency lease
//	   └─ sluice.call             the handler; the built-in HTTP job's request
//	      │                       carries its context (traceparent)
//	      └─ sluice.settle        the slot settled to the call's real cost
//
// The enqueue span's context travels in the job's envelope (W3C
// traceparent): a job run more than once (put back for its slot, retried
// by asynq) has one sluice.job span a run, each a child of its enqueue.

// tracerName names sluice's tracer.
const tracerName = "github.com/sluicehq/sluice/queue"

// tracer returns the tracer of tp, a no-op one for nil.
func tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return noop.NewTracerProvider().Tracer(tracerName)
	}
	return tp.Tracer(tracerName)
}

// traceparent returns the W3C traceparent of ctx's span, "" when it has
// none that is sampled or valid.
func traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// withTraceparent returns ctx with the remote span context of tp, a W3C
// traceparent ("": ctx as it is).
func withTraceparent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}

// childSpan starts a span named name under ctx's span, with its own
// tracer provider (no-op when ctx's span is not recording).
func childSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, name, opts...)
}

// endSpan ends span with err's status.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// InjectTrace sets the W3C trace context of ctx's span (traceparent) on
// h, for a handler's outbound call: the built-in HTTP job does it for its
// request. Nothing is set when ctx carries no span.
func InjectTrace(ctx context.Context, h propagation.TextMapCarrier) {
	propagation.TraceContext{}.Inject(ctx, h)
}

// jobAttrs are the attributes of a job's spans.
func jobAttrs(job *Job, queue string) []attribute.KeyValue {
	a := []attribute.KeyValue{
		attribute.String("sluice.queue", queue),
		attribute.String("sluice.tenant", job.Tenant[:min(len(job.Tenant), 64)]),
		attribute.String("sluice.job.id", job.ID),
		attribute.String("sluice.job.type", job.Type),
	}
	if job.Downstream != "" {
		a = append(a, attribute.String("sluice.downstream", job.Downstream))
	}
	return a
}

// span records a finished span from start to end under ctx's span.
func span(ctx context.Context, name string, start, end time.Time) {
	_, s := childSpan(ctx, name, trace.WithTimestamp(start))
	s.End(trace.WithTimestamp(end))
}

// traceRun starts the span of a run of r's job under its enqueue's span
// (from the enqueue for the job's first run, with its wait in the
// waiting room), and returns the function that ends it with the run's
// error: a job put back or rescheduled ends it without an error.
func (s *Server) traceRun(ctx context.Context, r *run) (context.Context, func(error)) {
	job := r.job
	started := time.Now()
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(jobAttrs(job, s.cfg.Queue)...),
		trace.WithAttributes(attribute.Int("sluice.job.moves", job.moves), attribute.Int("sluice.job.retried", job.retried))}
	fromEnqueue := r.first && job.moves == 0 && job.retried == 0 && !job.enqueuedAt.IsZero() && job.enqueuedAt.Before(started)
	if fromEnqueue {
		opts = append(opts, trace.WithTimestamp(job.enqueuedAt))
	}
	ctx, run := tracer(s.cfg.TracerProvider).Start(withTraceparent(ctx, job.trace), "sluice.job", opts...)
	if fromEnqueue {
		span(ctx, "sluice.waiting_room", latest(job.enqueuedAt, job.RunAt), started)
	}
	return ctx, func(err error) {
		var re *RescheduleError
		var far *throttle.TooFarError
		var busy *throttle.BusyError
		if errors.As(err, &re) || errors.As(err, &far) || errors.As(err, &busy) {
			err = nil
		}
		endSpan(run, err)
	}
}
