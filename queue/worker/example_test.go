package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/queue/worker"
	"github.com/sluicehq/sluice/throttle"
)

// A program with a job type of its own, which calls a CRM paced on the
// shared throttle: the worker runs it beside the built-in sluice.http
// job, and serves the sluice page, POST /enqueue, /metrics, /healthz and
// asynqmon, on the program's Redis. Here the
// program's own listener on port 0 and an embedded Redis; cmd/worker
// gives a listen address and a redis:// URL instead.
func Example() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	th, err := throttle.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer th.Close()
	crm := throttle.Limit{Name: "crm", Rate: 10, Per: time.Second, MaxWait: 10 * time.Second}
	synced := make(chan string, 1)

	cfg, err := policy.Parse([]byte("queue:\n  name: contacts\n  bound: 1000\n  types: [contact.sync]\n"))
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	w, err := worker.New(&worker.Config{Policy: cfg, Redis: rdb, Listener: ln, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	w.HandleFunc("contact.sync", func(ctx context.Context, job *queue.Job) error {
		var contact struct {
			Email string `json:"email"`
		}
		if err := json.Unmarshal(job.Payload, &contact); err != nil {
			return queue.Permanent(err) // archived: retrying cannot help
		}
		if strings.HasSuffix(contact.Email, ".invalid") {
			return queue.Reschedule(time.Hour, "waiting for a valid address") // no retry spent
		}
		// The CRM's calls are paced on the shared throttle, so that every
		// worker process together keeps to its quota. A slot further away
		// than MaxWait is a *throttle.TooFarError: returned, it puts the
		// job back for that time, spending no retry.
		if _, err := th.Wait(ctx, "crm:"+job.Tenant, crm, 1); err != nil {
			return err
		}
		synced <- contact.Email + " for " + job.Tenant // the call to the CRM
		return nil
	})
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	base := "http://" + ln.Addr().String()
	post := func(body string) {
		resp, err := http.Post(base+"/enqueue", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println("POST /enqueue:", resp.Status)
	}
	post(`{"tenant":"acme","type":"contact.sync","payload":{"email":"ada@example.com"}}`)
	fmt.Println("synced", <-synced)
	post(`{"tenant":"acme","type":"contact.delete"}`) // no worker handles it: refused
	for _, path := range []string{"/", "/metrics", "/healthz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println("GET", path, resp.Status)
	}
	stop() // as SIGTERM: running jobs finish, the rest return to the queue
	if err := <-ran; err != nil {
		panic(err)
	}
	// Output:
	// POST /enqueue: 202 Accepted
	// synced ada@example.com for acme
	// POST /enqueue: 400 Bad Request
	// GET / 200 OK
	// GET /metrics 200 OK
	// GET /healthz 200 OK
}
