package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestDuplicateEnqueueHTTPAndCLI: a job whose id its tenant has queued
// already is refused by a worker's POST /enqueue with 409 and reason
// "duplicate", and by the CLI with exit code 5, and nothing is added;
// another tenant's job of the id is its own; an id whose job has run may
// be used again. The api downstream allows one call an hour, so
// after the first job every job for it stays in the waiting room.
func TestDuplicateEnqueueHTTPAndCLI(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	a := newAPI(t, downstreamtest.Config{})
	f := newFleet(t, fmt.Sprintf(`queue:
  name: %s
  bound: 100
downstreams:
  api:
    base_url: %s/api/
    rate: 1
    per: 1h
    max_wait: 1s
`, queueName, a.URL()), "-redis", "redis://"+srv.Addr()+"/0")
	w := f.start()

	code, body, err := post(w.addr, a.jobLine("first", "t0"))
	if err != nil || code != http.StatusAccepted || body.ID != "first" {
		t.Fatalf("POST first: %d %+v %v", code, body, err)
	}
	poll(t, 20*time.Second, func() bool { return len(a.missing([]string{"first"})) == 0 },
		func() string { return "the first job did not reach the downstream" })
	code, body, err = post(w.addr, a.jobLine("waits", "t0"))
	if err != nil || code != http.StatusAccepted {
		t.Fatalf("POST waits: %d %+v %v", code, body, err)
	}

	// The same id again from its tenant: 409, with the id. From another
	// tenant: that tenant's own job (issue 19).
	code, body, err = post(w.addr, a.jobLine("waits", "t0"))
	if err != nil || code != http.StatusConflict || body.Reason != "duplicate" || body.ID != "waits" ||
		!strings.Contains(body.Error, `"waits" is already waiting in queue`) {
		t.Fatalf("POST waits again (tenant t0): %d %+v %v; want 409 duplicate", code, body, err)
	}
	code, body, err = post(w.addr, a.jobLine("waits", "t1"))
	if err != nil || code != http.StatusAccepted || body.ID != "waits" {
		t.Fatalf("POST waits of tenant t1: %d %+v %v; want 202, its own job", code, body, err)
	}
	// Wherever t1's job is meanwhile (waiting, handed to a worker that
	// finds its slot an hour away, or back in the waiting room), its id
	// is taken (docs/queue.md, Job ids).
	r := f.enqueue("", "-tenant", "t1", "-type", "sluice.http", "-downstream", "api", "-id", "waits",
		"-payload", fmt.Sprintf(`{"url":"%s/api/jobs/waits"}`, a.URL()))
	if r.code != 5 || r.stdout != "" || !strings.Contains(r.stderr, "duplicate job") || !strings.Contains(r.stderr, `"waits"`) {
		t.Fatalf("enqueue -id waits: exit %d, stdout %q, stderr %q; want exit 5 naming the id", r.code, r.stdout, r.stderr)
	}
	poll(t, 20*time.Second, func() bool {
		return strings.Contains(f.enqueue("", "stats").stdout, "2 with jobs, 2 asleep")
	}, func() string {
		return "t0's and t1's jobs were not both back in the waiting room: " + f.enqueue("", "stats").stdout
	})

	// The first job has run: its id is free.
	code, body, err = post(w.addr, a.jobLine("first", "t0"))
	if err != nil || code != http.StatusAccepted || body.ID != "first" {
		t.Fatalf("POST first after it ran: %d %+v %v; want 202", code, body, err)
	}
	r = f.enqueue("", "stats")
	if r.code != 0 || !strings.Contains(r.stdout, "depth        3 of 100") {
		t.Fatalf("stats: exit %d\n%s%s; want depth 3 (t0's and t1's waits, and first again)", r.code, r.stdout, r.stderr)
	}
	if calls := len(a.snapshot()); calls != 1 {
		t.Fatalf("%d calls reached the downstream; want 1", calls)
	}
}
