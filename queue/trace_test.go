package queue

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/throttle"
)

// TestTraceSpanTree: with a TracerProvider, a job is traced from its
// enqueue to done: sluice.enqueue, under it sluice.job (from the enqueue),
// and under that its waits and its call (waiting room, slot, lease, call),
// the settle under the call; the handler's context carries the call's
// trace context for its outbound request. Without one, nothing is traced
// and the envelope carries no trace context.
func TestTraceSpanTree(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		t.Cleanup(func() { tp.Shutdown(context.Background()) })
		cfg := testConfig(t, 100)
		cfg.TracerProvider = tp
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		th := testThrottle(t, client, nil)
		d := Downstream{Name: "api", Limit: throttle.Limit{Rate: 100, Per: time.Second}, Concurrency: &throttle.Concurrency{Max: 2}}
		sent := make(chan http.Header, 1)
		startServer(t, client, ServerConfig{Queue: cfg.Queue, TracerProvider: tp, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }},
			HandlerFunc(func(ctx context.Context, j *Job) error {
				h := http.Header{}
				InjectTrace(ctx, propagation.HeaderCarrier(h))
				if err := Settle(ctx, 1); err != nil {
					return err
				}
				sent <- h
				return nil
			}))
		if _, err := p.Enqueue(ctx, Job{ID: "j", Tenant: "acme", Type: "x", Downstream: "api"}); err != nil {
			t.Fatal(err)
		}
		h := <-sent
		byName := map[string]tracetest.SpanStub{}
		waitFor(t, 10*time.Second, "the job's span", func() bool {
			for _, s := range exp.GetSpans() {
				byName[s.Name] = s
			}
			_, ok := byName["sluice.job"]
			return ok
		})
		enq, job := byName["sluice.enqueue"], byName["sluice.job"]
		if enq.SpanKind != trace.SpanKindProducer || job.SpanKind != trace.SpanKindConsumer {
			t.Fatalf("kinds: enqueue %v, job %v", enq.SpanKind, job.SpanKind)
		}
		if job.Parent.SpanID() != enq.SpanContext.SpanID() || job.SpanContext.TraceID() != enq.SpanContext.TraceID() || !job.Parent.IsRemote() {
			t.Fatalf("the job's span is not a child of its enqueue's (remote, through the envelope): parent %v, enqueue %v", job.Parent, enq.SpanContext)
		}
		if job.StartTime.After(enq.EndTime) {
			t.Fatalf("the job's span starts at %v, after its enqueue ended at %v: want it from the enqueue", job.StartTime, enq.EndTime)
		}
		for _, name := range []string{"sluice.waiting_room", "sluice.slot", "sluice.lease", "sluice.call"} {
			s, ok := byName[name]
			if !ok || s.Parent.SpanID() != job.SpanContext.SpanID() {
				t.Fatalf("%s: %+v (found %v); want a child of the job's span", name, s.Parent, ok)
			}
			if s.StartTime.Before(job.StartTime) || s.EndTime.After(job.EndTime) {
				t.Fatalf("%s runs %v-%v, outside the job's %v-%v", name, s.StartTime, s.EndTime, job.StartTime, job.EndTime)
			}
		}
		call := byName["sluice.call"]
		if s := byName["sluice.settle"]; s.Parent.SpanID() != call.SpanContext.SpanID() {
			t.Fatalf("settle's parent %v; want the call %v", s.Parent.SpanID(), call.SpanContext.SpanID())
		}
		if want := "00-" + call.SpanContext.TraceID().String() + "-" + call.SpanContext.SpanID().String() + "-01"; h.Get("traceparent") != want {
			t.Fatalf("the handler's traceparent %q; want the call's %q", h.Get("traceparent"), want)
		}
	})
}

// TestNoTraceWithoutProvider: without a TracerProvider the envelope
// carries no trace context, even under a caller's span.
func TestNoTraceWithoutProvider(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("caller").Start(context.Background(), "caller")
	defer span.End()
	cfg := testConfig(t, 10)
	client := redistest.Targets()[0].Client(t)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, Job{ID: "j", Tenant: "acme", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	k, _, list, _ := p.shards.tenant("acme")
	e, err := client.LIndex(context.Background(), list, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	j, err := decodeItem(e)
	if err != nil || j.trace != "" {
		t.Fatalf("job %+v, %v in %s; want no trace context", j, err, k.queue)
	}
}
