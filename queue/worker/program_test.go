package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// TestProgramWithOwnHandler: a program that runs a Worker with a handler
// of its own, on miniredis, a redis-server and a cluster, gets the page,
// /metrics (the program's own series beside sluice's, on its Registry),
// /healthz and asynqmon; its POST /enqueue takes the program's job type
// although the policy's queue.types does not list it, and refuses a type
// no handler takes; and the handler runs the job, with its tenant and
// payload.
func TestProgramWithOwnHandler(t *testing.T) {
	for _, tg := range redistest.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			client := tg.Client(t)
			name := strings.Trim(redistest.KeyPrefix(t), ":")
			cfg, err := policy.Parse([]byte("queue:\n  name: " + name + "\n  bound: 100\n  types: [email.send]\n"))
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			synced := prometheus.NewCounter(prometheus.CounterOpts{Name: "program_contacts_synced_total", Help: "Contacts synced."})
			reg.MustRegister(synced)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			log := &syncBuffer{}
			w, err := New(&Config{Policy: cfg, Redis: client, Listener: ln, Registry: reg, Concurrency: 2,
				Logger: slog.New(slog.NewTextHandler(log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			jobs := make(chan queue.Job, 1)
			w.HandleFunc("contact.sync", func(ctx context.Context, job *queue.Job) error {
				synced.Inc()
				jobs <- *job
				return nil
			})
			runUntilCleanup(t, w, log)
			base := "http://" + ln.Addr().String()

			post := func(body string) (int, queue.EnqueueResponse) { return postJob(t, ln.Addr().String(), body) }
			code, r := post(`{"tenant":"acme","type":"contact.sync","id":"c-1","payload":{"email":"ada@example.com"}}`)
			if code != http.StatusAccepted {
				t.Fatalf("POST /enqueue contact.sync: %d %+v\n%s", code, r, log.String())
			}
			select {
			case job := <-jobs:
				if job.Tenant != "acme" || job.ID != "c-1" || string(job.Payload) != `{"email":"ada@example.com"}` {
					t.Fatalf("the handler ran %+v", job)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the handler did not run the job within 10s\n%s", log.String())
			}
			if code, r := post(`{"tenant":"acme","type":"contact.delete"}`); code != http.StatusBadRequest || !strings.Contains(r.Error, "contact.sync") {
				t.Fatalf("POST /enqueue of a type no handler takes: %d %+v; want 400 naming the known types", code, r)
			}
			get := func(path string) string {
				t.Helper()
				resp, err := http.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
				}
				return string(b)
			}
			if page := get("/"); !strings.Contains(page, name) {
				t.Errorf("the page does not name the queue %q", name)
			}
			waitUntil(t, 10*time.Second, "the job in /metrics", func() bool {
				m := get("/metrics")
				return strings.Contains(m, "program_contacts_synced_total 1") && strings.Contains(m, `sluice_queue_started_total{queue="`+name+`"} 1`)
			})
			if h := get("/healthz"); !strings.Contains(h, "ok") {
				t.Errorf("/healthz: %q", h)
			}
			get("/monitoring/")
			if !strings.Contains(log.String(), "type=contact.sync") || !strings.Contains(log.String(), "not in the policy's queue.types") {
				t.Errorf("no word that contact.sync is not in queue.types:\n%s", log.String())
			}
		})
	}
}

// postJob sends body to the POST /enqueue of the worker at addr and
// returns the status and the answer.
func postJob(t *testing.T, addr, body string) (int, queue.EnqueueResponse) {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/enqueue", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r queue.EnqueueResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r
}

// TestNewRefusesBadConfig: a Config that cannot run is an error wrapping
// ErrConfig from New (nil among them: it names no policy), not a panic;
// a second Run is an error; and Handle panics, as a ServeMux does, on a
// type that is invalid or taken (the built-in one among them).
func TestNewRefusesBadConfig(t *testing.T) {
	cfg, err := policy.Parse([]byte("queue:\n  bound: 10\n"))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Mini(t)
	for name, c := range map[string]*Config{
		"nil":                  nil,
		"no policy":            {Redis: rdb},
		"two policies":         {Policy: cfg, PolicyFile: "p.yaml", Redis: rdb},
		"no redis":             {Policy: cfg},
		"a client and a URL":   {Policy: cfg, Redis: rdb, RedisURL: "redis://127.0.0.1:1/0"},
		"embedded and cluster": {Policy: cfg, RedisURL: EmbeddedRedis, RedisCluster: "127.0.0.1:1"},
		"negative concurrency": {Policy: cfg, Redis: rdb, Concurrency: -1},
		"fallback above 1":     {Policy: cfg, Redis: rdb, Fallback: 1.5},
		"negative shutdown":    {Policy: cfg, Redis: rdb, ShutdownTimeout: -time.Second},
		"negative check":       {Policy: cfg, Redis: rdb, RedisCheckEvery: -time.Second},
		"a URL as a host":      {Policy: cfg, Redis: rdb, AllowedHosts: []string{"http://a.example"}},
	} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(&Config{Policy: cfg, Redis: rdb, Listener: ln, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"sluice.http", "bad type", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handle(%q) did not panic", typ)
				}
			}()
			w.HandleFunc(typ, func(context.Context, *queue.Job) error { return nil })
		}()
	}
	runUntilCleanup(t, w, new(strings.Builder))
	waitUntil(t, 10*time.Second, "the worker to serve", func() bool {
		resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("a second Run did not fail")
	}
}
