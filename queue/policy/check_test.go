package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
)

// TestCheckJob: what the policy already rules out is refused with a reason
// that names it; what it allows passes.
func TestCheckJob(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  api: {rate: 10, burst: 3, base_url: http://a.com/api/}",
		"  other: {rate: 10, base_url: http://b.com/}",
		"  bare: {rate: 10}",
	))
	http := func(url string) []byte { return []byte(`{"method":"GET","url":"` + url + `"}`) }
	req := func(method, header string) queue.Job {
		return queue.Job{Type: "sluice.http", Downstream: "api",
			Payload: []byte(`{"method":` + method + `,"url":"http://a.com/api/x","header":` + header + `}`)}
	}
	tests := []struct {
		name string
		job  queue.Job
		want string // "" to pass
		is   error
	}{
		{"no downstream", queue.Job{Type: "x"}, "", nil},
		{"known", queue.Job{Type: "x", Downstream: "api", Cost: 3}, "", nil},
		{"unknown", queue.Job{Type: "x", Downstream: "nope"}, `unknown downstream "nope"`, ErrUnknownDownstream},
		{"cost above burst", queue.Job{Type: "x", Downstream: "api", Cost: 4}, "cost 4 exceeds downstream \"api\"'s burst of 3", algorithms.ErrCostExceedsCapacity},
		{"cost above the default burst", queue.Job{Type: "x", Downstream: "bare", Cost: 2}, "burst of 1", algorithms.ErrCostExceedsCapacity},
		{"http ok", queue.Job{Type: "sluice.http", Downstream: "api", Payload: http("http://a.com/api/orders")}, "", nil},
		{"http no downstream", queue.Job{Type: "sluice.http", Payload: http("http://a.com/api/orders")}, "must name its downstream", nil},
		{"http outside base_url", queue.Job{Type: "sluice.http", Downstream: "api", Payload: http("http://evil.com/x")}, "no downstream's base_url covers", ErrURLNotAllowed},
		{"http other downstream's url", queue.Job{Type: "sluice.http", Downstream: "api", Payload: http("http://b.com/x")}, `belongs to downstream "other", not "api"`, ErrURLNotAllowed},
		{"http unknown downstream", queue.Job{Type: "sluice.http", Downstream: "nope", Payload: http("http://a.com/api/")}, "unknown downstream", ErrUnknownDownstream},
		{"http no url", queue.Job{Type: "sluice.http", Downstream: "api", Payload: []byte(`{}`)}, "url is required", nil},
		{"http not json", queue.Job{Type: "sluice.http", Downstream: "api", Payload: []byte(`GET /`)}, "payload is not an HTTP request", nil},
		// What net/http can never send (issue 19, finding 6); the
		// error names no header and no value.
		{"http PATCH, tab in a value", req(`"PATCH"`, `{"X-Ok":"a\tb"}`), "", nil},
		{"http no method", req(`""`, `{}`), "", nil},
		{"http TRACE", req(`"TRACE"`, `{}`), "method is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS", nil},
		{"http CONNECT", req(`"CONNECT"`, `{}`), "method is not one of", nil},
		{"http lower-case get", req(`"get"`, `{}`), "method is not one of", nil},
		{"http method with CRLF", req(`"GET\r\nX-Secret: 1"`, `{}`), "method is not one of", nil},
		{"http header name with a space", req(`"GET"`, `{"X Secret-Name":"1"}`), "a header name is not a token", nil},
		{"http header name with a colon", req(`"GET"`, `{"X-Secret-Name:":"1"}`), "a header name is not a token", nil},
		{"http empty header name", req(`"GET"`, `{"":"1"}`), "a header name is not a token", nil},
		{"http header value with CRLF", req(`"GET"`, `{"X-Secret-Name":"v\r\nX-Injected: 1"}`), "a header value holds a control character", nil},
		{"http header value with LF", req(`"GET"`, `{"X-Secret-Name":"Secret-Value\n"}`), "a header value holds a control character", nil},
		{"http header value with NUL", req(`"GET"`, `{"X-Secret-Name":"Secret-Value\u0000"}`), "a header value holds a control character", nil},
		{"http header value with DEL", req(`"GET"`, `{"X-Secret-Name":"Secret-Value\u007f"}`), "a header value holds a control character", nil},
	}
	for _, tt := range tests {
		err := cfg.CheckJob(&tt.job)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v; want an error with %q", tt.name, err, tt.want)
		case tt.is != nil && !errors.Is(err, tt.is):
			t.Errorf("%s: %v does not wrap %v", tt.name, err, tt.is)
		case err != nil && strings.Contains(strings.ToLower(err.Error()), "secret"):
			t.Errorf("%s: the error echoes the header: %v", tt.name, err)
		}
	}
	// QueueConfig hands the check to the producer.
	if qc := cfg.QueueConfig(); qc.Check == nil {
		t.Fatal("QueueConfig has no Check")
	}
}

// TestQueueTypes: with queue.types, a job of a type the file does not
// list is refused with an error that names the known types (sluice.http
// among them, listed or not); without it, every type passes.
func TestQueueTypes(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue:",
		"  name: mail",
		"  bound: 10",
		"  types: [email.send, \"report:build/v2\"]",
		"downstreams:",
		"  api: {rate: 10, base_url: http://a.com/}",
	))
	if want := []string{"email.send", "report:build/v2", "sluice.http"}; !slices.Equal(cfg.Queue.Types, want) {
		t.Fatalf("Types = %q, want %q", cfg.Queue.Types, want)
	}
	for _, job := range []queue.Job{
		{Type: "email.send"},
		{Type: "report:build/v2"},
		{Type: "sluice.http", Downstream: "api", Payload: []byte(`{"url":"http://a.com/x"}`)},
	} {
		if err := cfg.CheckJob(&job); err != nil {
			t.Errorf("%s: refused: %v", job.Type, err)
		}
	}
	job := queue.Job{Type: "junk.type", Tenant: "t"}
	err := cfg.CheckJob(&job)
	const want = `unknown job type "junk.type": no worker of queue "mail" handles it (the policy's queue.types); known types: email.send, report:build/v2, sluice.http`
	if err == nil || err.Error() != want || !errors.Is(err, ErrUnknownType) {
		t.Fatalf("CheckJob(junk.type) = %v;\nwant %s (wrapping ErrUnknownType)", err, want)
	}
	// Through a Producer of QueueConfig, it is an ErrInvalidJob.
	qc := cfg.QueueConfig()
	p, err := queue.NewProducer(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), &qc)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(job); !errors.Is(err, queue.ErrInvalidJob) || !errors.Is(err, ErrUnknownType) {
		t.Fatalf("Producer.Check(junk.type) = %v; want ErrInvalidJob and ErrUnknownType", err)
	}
	// A long list is cut short in the error.
	many := []string{}
	for i := range 30 {
		many = append(many, fmt.Sprintf("t%02d", i))
	}
	cfg = mustParse(t, doc("queue:", "  bound: 10", "  types: ["+strings.Join(many, ", ")+"]"))
	if err := cfg.CheckJob(&job); err == nil || !strings.HasSuffix(err.Error(), "t18, t19 and 11 more") {
		t.Fatalf("CheckJob with 31 known types: %v; want the first 20 and a count", err)
	}
	// An empty list knows only sluice.http; no list, every type.
	cfg = mustParse(t, doc("queue:", "  bound: 10", "  types: []"))
	if err := cfg.CheckJob(&queue.Job{Type: "email.send"}); err == nil || !strings.HasSuffix(err.Error(), "known types: sluice.http") {
		t.Fatalf("types: []: %v", err)
	}
	cfg = mustParse(t, doc("queue:", "  bound: 10"))
	if err := cfg.CheckJob(&job); err != nil || cfg.Queue.Types != nil {
		t.Fatalf("no types: %v, Types %q; want every type accepted", err, cfg.Queue.Types)
	}
}
