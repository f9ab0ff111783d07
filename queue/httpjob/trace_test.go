package httpjob

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestRequestCarriesTraceContext: the built-in HTTP job's request carries
// the W3C trace context of the span its ctx holds (the worker's call
// span), and none without one.
func TestRequestCarriesTraceContext(t *testing.T) {
	th := newThrottle(t)
	got := make(chan string, 1)
	api := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	job := &Handler{Throttle: th, Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: throttle.Limit{Name: "api", Rate: 1000}}, nil
	}}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "sluice.call")
	defer span.End()
	payload := []byte(`{"method":"POST","url":"` + api + `/x"}`)
	for _, c := range []struct {
		ctx  context.Context
		want string
	}{
		{ctx, "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"},
		{context.Background(), ""},
	} {
		if err := job.ProcessJob(c.ctx, &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "api", Payload: payload}); err != nil {
			t.Fatal(err)
		}
		if v := <-got; v != c.want {
			t.Errorf("traceparent %q, want %q", v, c.want)
		}
	}
}
