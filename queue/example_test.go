package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/queue"
)

// A Producer admits each job by its tenant's policy and against the
// queue's bound, and says why when it refuses: a *RateLimitedError carries
// the admission decision (when to retry), a *QueueFullError the depth and
// the bound. Here tenant "acme" may enqueue 2 jobs a minute, and the queue
// holds at most 3 jobs that have not started. The admission decisions are
// taken on the Redis server's clock, which the embedded Redis holds still.
func ExampleProducer_Enqueue() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	perMinute := algorithms.Policy{Algorithm: algorithms.FixedWindow, Limit: 2, Period: time.Minute}
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	p, err := queue.NewProducer(rdb, &queue.Config{
		Queue: "emails",
		Bound: 3,
		Tenants: func(tenant string) queue.TenantPolicy {
			if tenant == "acme" {
				return queue.TenantPolicy{Admission: &perMinute}
			}
			return queue.TenantPolicy{} // admitted without a policy
		},
	})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	for _, tenant := range []string{"acme", "acme", "acme", "globex", "initech"} {
		rc, err := p.Enqueue(ctx, queue.Job{Tenant: tenant, Type: "email.send", Payload: []byte(`{"to":"a@example.com"}`)})
		var limited *queue.RateLimitedError
		var full *queue.QueueFullError
		switch {
		case err == nil:
			fmt.Printf("%s: accepted, depth %d\n", tenant, rc.Depth)
		case errors.As(err, &limited):
			fmt.Printf("%s: rate limited, %d of %d left, retry after %v\n",
				tenant, limited.Decision.Remaining, limited.Decision.Limit, limited.Decision.RetryAfter)
		case errors.As(err, &full):
			fmt.Printf("%s: queue %s full, %d of %d\n", tenant, full.Queue, full.Depth, full.Bound)
		default:
			panic(err) // Redis unreachable, or an invalid job (errors.Is ErrInvalidJob)
		}
	}
	// Output:
	// acme: accepted, depth 1
	// acme: accepted, depth 2
	// acme: rate limited, 0 of 2 left, retry after 1m0s
	// globex: accepted, depth 3
	// initech: queue emails full, 3 of 3
}

// A job's id is refused while a job with that id is in the queue, so a
// producer that lost the answer to an enqueue (a timeout) can send it
// again without queueing the job twice.
func ExampleDuplicateJobError() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	p, err := queue.NewProducer(rdb, &queue.Config{Queue: "invoices", Bound: 100})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	job := queue.Job{ID: "invoice-42", Tenant: "acme", Type: "invoice.create"}
	for attempt := 1; attempt <= 2; attempt++ {
		rc, err := p.Enqueue(ctx, job)
		var dup *queue.DuplicateJobError
		switch {
		case err == nil:
			fmt.Printf("attempt %d: accepted %s, depth %d\n", attempt, rc.ID, rc.Depth)
		case errors.As(err, &dup):
			fmt.Printf("attempt %d: %s is queued already\n", attempt, dup.ID)
		default:
			panic(err)
		}
	}
	// Output:
	// attempt 1: accepted invoice-42, depth 1
	// attempt 2: invoice-42 is queued already
}

// A ServeMux routes jobs to handlers by type, as net/http's does by path;
// middleware registered with Use wraps every handler, the first given
// outermost, and sees jobs of a type no handler takes as well. A Server calls the mux for each job; here it is called
// directly.
func ExampleServeMux() {
	mux := queue.NewServeMux()
	mux.Use(
		func(next queue.Handler) queue.Handler {
			return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) error {
				fmt.Println("log: start", job.Type, "for", job.Tenant)
				err := next.ProcessJob(ctx, job)
				fmt.Println("log: end", job.Type, "err:", err)
				return err
			})
		},
		func(next queue.Handler) queue.Handler {
			return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) error {
				if len(job.Payload) == 0 {
					return queue.Permanent(errors.New("empty payload")) // archived, not retried
				}
				return next.ProcessJob(ctx, job)
			})
		},
	)
	mux.HandleFunc("email.send", func(ctx context.Context, job *queue.Job) error {
		fmt.Printf("sending %s\n", job.Payload)
		return nil
	})
	mux.HandleFunc("report.build", func(ctx context.Context, job *queue.Job) error {
		// Not now, and without spending a retry: run again in a minute.
		return queue.Reschedule(time.Minute, "warehouse busy")
	})

	ctx := context.Background()
	mux.ProcessJob(ctx, &queue.Job{Tenant: "acme", Type: "email.send", Payload: []byte(`{"to":"a@example.com"}`)})
	mux.ProcessJob(ctx, &queue.Job{Tenant: "acme", Type: "email.send"})
	err := mux.ProcessJob(ctx, &queue.Job{Tenant: "acme", Type: "report.build", Payload: []byte(`{}`)})
	var re *queue.RescheduleError
	if errors.As(err, &re) {
		fmt.Println("rescheduled after", re.After)
	}
	err = mux.ProcessJob(ctx, &queue.Job{Tenant: "acme", Type: "sms.send", Payload: []byte(`{}`)})
	fmt.Println(errors.Is(err, queue.ErrNoHandler), err)
	// Output:
	// log: start email.send for acme
	// sending {"to":"a@example.com"}
	// log: end email.send err: <nil>
	// log: start email.send for acme
	// log: end email.send err: empty payload
	// log: start report.build for acme
	// log: end report.build err: sluice: rescheduled in 1m0s: warehouse busy
	// rescheduled after 1m0s
	// log: start sms.send for acme
	// log: end sms.send err: sluice: no handler for job type "sms.send"
	// true sluice: no handler for job type "sms.send"
}

// HTTPHandler is the enqueue endpoint for services in other languages:
// POST a JSON job, get 202 with its id, or 429 with Retry-After and the
// IETF RateLimit fields when the tenant's admission refuses.
func ExampleHTTPHandler() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	perMinute := algorithms.Policy{Algorithm: algorithms.FixedWindow, Limit: 1, Period: time.Minute}
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	p, err := queue.NewProducer(rdb, &queue.Config{
		Bound:   100,
		Tenants: func(string) queue.TenantPolicy { return queue.TenantPolicy{Admission: &perMinute} },
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(queue.HTTPHandler(p))
	defer srv.Close()

	for _, order := range []int{41, 42} {
		body := fmt.Sprintf(`{"id":"order-%d","tenant":"acme","type":"invoice.create","payload":{"order":%d}}`, order, order)
		resp, err := http.Post(srv.URL+"/enqueue", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		var answer queue.EnqueueResponse
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Printf("%d id=%q reason=%q Retry-After=%q RateLimit=%q\n", resp.StatusCode,
			answer.ID, answer.Reason, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"))
	}
	// Output:
	// 202 id="order-41" reason="" Retry-After="" RateLimit="\"tenant\";r=0;t=60"
	// 429 id="" reason="rate_limited" Retry-After="60" RateLimit="\"tenant\";r=0;t=60"
}
