package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// crmClient stands in for a vendor's SDK. Each call first waits for its
// slot on the shared throttle, so every worker process together keeps to
// the vendor's quota, however many calls a job makes.
type crmClient struct {
	throttle *throttle.Throttle
	limit    throttle.Limit
}

// UpsertContact is one API call of the SDK.
func (c *crmClient) UpsertContact(ctx context.Context, account, email string) error {
	// Returns when this call's slot has come; a *throttle.TooFarError when
	// it is further away than the limit's MaxWait (the worker then puts
	// the job back for that time, spending no retry).
	if _, err := c.throttle.Wait(ctx, "crm:"+account, c.limit, 1); err != nil {
		return err
	}
	fmt.Println("crm: upsert", email, "for", account)
	return nil
}

// A custom job type: a handler registered on a ServeMux, run by a Server,
// calling the vendor's SDK, which paces its own calls with throttle. The
// jobs name no Downstream, so the Server takes no slot before a job: the
// SDK takes one per call. A Producer enqueues the jobs, as a web service
// would.
func Example_customHandler() {
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
	crm := &crmClient{throttle: th, limit: throttle.Limit{Name: "crm", Rate: 10, Per: time.Second, Burst: 3, MaxWait: 10 * time.Second}}

	done := make(chan struct{})
	mux := queue.NewServeMux()
	mux.HandleFunc("contact.sync", func(ctx context.Context, job *queue.Job) error {
		defer func() { done <- struct{}{} }()
		var contact struct {
			Email string `json:"email"`
		}
		if err := json.Unmarshal(job.Payload, &contact); err != nil {
			return queue.Permanent(err) // archived: retrying cannot help
		}
		return crm.UpsertContact(ctx, job.Tenant, contact.Email)
	})

	cfg := queue.Config{Queue: "contacts", Bound: 1000}
	p, err := queue.NewProducer(rdb, &cfg)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, email := range []string{"ada@example.com", "grace@example.com", "edsger@example.com"} {
		payload, _ := json.Marshal(map[string]string{"email": email})
		if _, err := p.Enqueue(ctx, queue.Job{Tenant: "acme", Type: "contact.sync", Payload: payload}); err != nil {
			panic(err)
		}
	}

	srv, err := queue.NewServer(rdb, &queue.ServerConfig{Queue: "contacts", Concurrency: 1})
	if err != nil {
		panic(err)
	}
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	for range 3 {
		<-done
	}
	// Output:
	// crm: upsert ada@example.com for acme
	// crm: upsert grace@example.com for acme
	// crm: upsert edsger@example.com for acme
}
