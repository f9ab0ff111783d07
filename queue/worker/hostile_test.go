package worker

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// runWorker runs a worker configured by the worker command's flags args
// plus -policy, on a loopback listener of its own, logging to out, and
// stops it when the test ends, requiring Run to return nil. It returns
// the listen address.
func runWorker(t *testing.T, policy string, args ...string) (addr string, out *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	cfg := flagConfig(t, append([]string{"-policy", policy}, args...)...)
	cfg.Listener = ln
	out = &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(out, nil))
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, w, out)
	waitUntil(t, 10*time.Second, "the worker to serve /healthz", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr, out
}

// flagConfig returns the Config of the worker command's flags args, the
// environment left out.
func flagConfig(t *testing.T, args ...string) *Config {
	t.Helper()
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	f := NewFlags(fs, nil)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runUntilCleanup runs w until the test ends, then stops it and
// requires Run to return nil; log is what the test shows when it does
// not.
func runUntilCleanup(t *testing.T, w *Worker, log fmt.Stringer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v\n%s", err, log.String())
		}
	})
}

// waitUntil polls cond every 20 ms until it holds, failing the test
// after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestWorkerArchivesUnsendableJobs: sluice.http jobs that net/http could
// never send (a TRACE or CONNECT, a header name with a space, a value
// with CR LF or NUL), written past the enqueue check as an earlier
// version or another producer might, are archived at once: no call to
// the downstream, no retry, and an error that names neither the header
// nor its value (issue 19, finding 6).
func TestWorkerArchivesUnsendableJobs(t *testing.T) {
	m := miniredis.RunT(t)
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer api.Close()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("queue:\n  name: unsendable\n  bound: 10\n"+
		"downstreams:\n  api:\n    base_url: "+api.URL+"/\n    rate: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runWorker(t, file, "-redis", "redis://"+m.Addr()+"/0")
	cfg, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	qc := cfg.QueueConfig()
	qc.Check = nil // as a producer that skips the policy's check
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	p, err := queue.NewProducer(client, &qc)
	if err != nil {
		t.Fatal(err)
	}
	payloads := []string{
		`{"method":"TRACE","url":"` + api.URL + `/x"}`,
		`{"method":"CONNECT","url":"` + api.URL + `/x"}`,
		`{"url":"` + api.URL + `/x","header":{"X Secret-Name":"1"}}`,
		`{"url":"` + api.URL + `/x","header":{"X-Secret-Name":"v\r\nX-Injected: 1"}}`,
		`{"url":"` + api.URL + `/x","header":{"X-Secret-Name":"Secret-Value\u0000"}}`,
	}
	for _, pl := range payloads {
		if _, err := p.Enqueue(context.Background(), queue.Job{Tenant: "a", Type: "sluice.http", Downstream: "api", Payload: []byte(pl)}); err != nil {
			t.Fatal(err)
		}
	}
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: m.Addr()})
	defer ins.Close()
	var archived []*asynq.TaskInfo
	waitUntil(t, 10*time.Second, "archive of the five jobs", func() bool {
		archived, err = ins.ListArchivedTasks("unsendable")
		return err == nil && len(archived) == len(payloads)
	})
	for _, ti := range archived {
		if ti.Retried != 0 || strings.Contains(strings.ToLower(ti.LastErr), "secret") {
			t.Errorf("archived after %d retries with %q; want none, and no header in the error", ti.Retried, ti.LastErr)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d calls reached the downstream", n)
	}
}
