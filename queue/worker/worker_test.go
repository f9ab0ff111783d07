package worker

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
)

// TestMain checks that a worker run to its end (SIGTERM, a bad policy)
// leaves no goroutine behind.
func TestMain(m *testing.M) { redistest.Main(m) }

// TestWorkerEndpoints runs the worker on an embedded Redis and checks its
// HTTP surface, then stops it as SIGTERM would.
func TestWorkerEndpoints(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(policy, []byte("queue:\n  bound: 10\n"), 0o644)
	addr, out := runWorker(t, policy, "-redis", "embedded")
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, out.String())
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, "ok") {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	resp, err := http.Post("http://"+addr+"/enqueue", "application/json", strings.NewReader(`{"tenant":"a","type":"x"}`))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /enqueue: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "sluice_queue_handed_over_total") {
		t.Fatalf("/metrics: %d, missing sluice series", code)
	}
	if code, _ := get("/monitoring/"); code != 200 {
		t.Fatalf("/monitoring/: %d", code)
	}
	if !strings.Contains(out.String(), "embedded Redis") {
		t.Fatalf("no notice of the embedded Redis:\n%s", out.String())
	}
}

// TestWorkerRetention checks that queue.retention reaches asynq: a
// completed job is kept for the policy's time, not the default.
func TestWorkerRetention(t *testing.T) {
	m := miniredis.RunT(t)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer api.Close()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: ret\n  bound: 10\n  retention: 25m\n"+
		"downstreams:\n  api:\n    base_url: "+api.URL+"/\n    rate: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, out := runWorker(t, policy, "-redis", "redis://"+m.Addr()+"/0")
	body := `{"tenant":"a","type":"sluice.http","downstream":"api","payload":{"url":"` + api.URL + `/x"}}`
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post("http://"+addr+"/enqueue", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST /enqueue: %d", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("POST /enqueue: %v\n%s", err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: m.Addr()})
	defer ins.Close()
	for {
		done, err := ins.ListCompletedTasks("ret")
		if err == nil && len(done) == 1 {
			if done[0].Retention != 25*time.Minute {
				t.Fatalf("completed task kept for %v; the policy says 25m", done[0].Retention)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed task within 10s (%v, %d)\n%s", err, len(done), out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJobTally: of the jobs running when the worker is told to stop, one
// that finishes counts as finished, one cut short by the shutdown timeout
// as returned to the queue; jobs before the stop count only in the total.
func TestJobTally(t *testing.T) {
	var tally jobTally
	release := make(chan struct{})
	h := tally.wrap(queue.HandlerFunc(func(ctx context.Context, j *queue.Job) error {
		if j.Type == "quick" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-release:
			return nil
		}
	}))
	if err := h.ProcessJob(context.Background(), &queue.Job{Type: "quick"}); err != nil {
		t.Fatal(err)
	}
	cut, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { h.ProcessJob(cut, &queue.Job{Type: "slow"}); done <- struct{}{} }()
	go func() { h.ProcessJob(context.Background(), &queue.Job{Type: "slow"}); done <- struct{}{} }()
	for tally.running.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	if n := tally.stop(); n != 2 {
		t.Fatalf("running at stop: %d, want 2", n)
	}
	cancel()
	<-done
	close(release)
	<-done
	if f, r := tally.afterStop(); f != 1 || r != 1 || tally.total.Load() != 3 {
		t.Fatalf("finished %d, returned %d, total %d; want 1, 1, 3", f, r, tally.total.Load())
	}
}
