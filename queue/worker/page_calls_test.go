package worker

import (
	"context"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// TestPageCountsEveryJobType: the page counts the calls of a job type
// of the program's own, and its refusals (queue.Refused), as it does the
// built-in HTTP job's: it showed 0 for them. The count is read from the
// worker's own counters, not by gathering the registry.
func TestPageCountsEveryJobType(t *testing.T) {
	client := redistest.Shared(t)
	name := strings.Trim(redistest.KeyPrefix(t), ":")
	cfg, err := policy.Parse([]byte("queue:\n  name: " + name + "\n  bound: 100\ndownstreams:\n  mail:\n    rate: 1000\n"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	w, err := New(&Config{Policy: cfg, Redis: client, Listener: ln, Registry: prometheus.NewRegistry(), Concurrency: 2,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 8)
	w.HandleFunc("email.send", func(ctx context.Context, job *queue.Job) error {
		defer func() { done <- struct{}{} }()
		if string(job.Payload) == "bounce" && job.Refusals() == 0 {
			return queue.Refused(time.Millisecond, "HTTP 429 from the mail API")
		}
		return nil
	})
	runUntilCleanup(t, w, log)
	waitUntil(t, 20*time.Second, "the worker to start", func() bool { return strings.Contains(log.String(), "sluice worker started") })
	for _, payload := range []string{"a", "b", "bounce"} {
		if _, err := w.producer.Enqueue(context.Background(), queue.Job{Tenant: "acme", Type: "email.send", Downstream: "mail", Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // three jobs, one of them run twice
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("the jobs did not run\n%s", log.String())
		}
	}
	waitUntil(t, 5*time.Second, "the counts", func() bool {
		all, refused := w.responsesByDownstream()
		return all["mail"] == 4 && refused["mail"] == 1
	})
	rec := httptest.NewRecorder()
	w.servePage(rec, httptest.NewRequest("GET", "/", nil))
	if body := rec.Body.String(); !strings.Contains(body, `<span class="dim">this worker</span> 4 · 1`) {
		t.Errorf("the page does not count the program's job type's 4 calls and 1 refusal:\n%s", body)
	}
}
