package queuetest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/queuetest"
	"github.com/sluicehq/sluice/throttle"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// queueName is a queue of t's own, for a Redis that other tests share.
func queueName(t *testing.T) string {
	n := strings.Trim(strings.NewReplacer("/", "_", " ", "_", ":", "_").Replace(redistest.KeyPrefix(t)), "_")
	return "q" + n[max(0, len(n)-50):]
}

// TestWork: a handler run by Work is given the job as a worker gives it
// (tenant, downstream, no retry yet) and the worker's context (the job's
// timeout, the slot booked at its units, which Settle corrects); Work
// returns what it returned and runs it once; what it enqueued on the
// Producer waits, listed by Waiting in order, due jobs first, and only
// for its tenant.
func TestWork(t *testing.T) {
	for _, tg := range redistest.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			q, err := queuetest.New(&queuetest.Options{
				Client: tg.Client(t),
				Config: queue.Config{Queue: queueName(t), Prefix: redistest.KeyPrefix(t) + "q"},
				Downstreams: map[string]queue.Downstream{
					"api": {Name: "api", Limit: throttle.Limit{Name: "api", Rate: 100, Burst: 10}},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			ctx := context.Background()
			errLater := errors.New("try again later")
			runs := 0
			h := queue.HandlerFunc(func(ctx context.Context, job *queue.Job) error {
				runs++
				if job.Tenant != "acme" || job.Downstream != "api" || job.Retried() != 0 || job.EnqueuedAt().IsZero() {
					t.Errorf("the handler was given %+v (retried %d, enqueued at %v)", job, job.Retried(), job.EnqueuedAt())
				}
				if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > 5*time.Second {
					t.Errorf("the handler's context ends at %v (%v); want the job's 5s timeout", dl, ok)
				}
				r, ok := queue.Reservation(ctx)
				if !ok || !r.OK || r.Cost() != 3 {
					t.Errorf("the handler's slot: %+v, %v; want one booked at the job's 3 units", r, ok)
				}
				if err := queue.Settle(ctx, 1); err != nil {
					t.Errorf("Settle: %v", err)
				}
				for _, next := range []queue.Job{
					{Tenant: "acme", Type: "email.later", RunAt: time.Now().Add(time.Hour)},
					{Tenant: "acme", Type: "email.now", Payload: []byte("hi")},
				} {
					if _, err := q.Producer.Enqueue(ctx, next); err != nil {
						return err
					}
				}
				return errLater
			})
			run, err := q.Work(ctx, h, queue.Job{Tenant: "acme", Type: "signup", Downstream: "api", Units: 3, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(run.Err, errLater) || run.Job == nil || run.Job.Type != "signup" || runs != 1 {
				t.Fatalf("Work: %+v after %d runs; want the handler's error after one", run, runs)
			}
			waiting, err := q.Waiting(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			if len(waiting) != 2 || waiting[0].Type != "email.now" || string(waiting[0].Payload) != "hi" || waiting[1].Type != "email.later" {
				t.Fatalf("acme's waiting jobs: %+v; want email.now, then email.later", waiting)
			}
			if other, err := q.Waiting(ctx, "globex"); err != nil || len(other) != 0 {
				t.Fatalf("globex's waiting jobs: %+v, %v; want none", other, err)
			}
			// A second Work starts clean: the first job was not retried.
			run, err = q.Work(ctx, queue.HandlerFunc(func(context.Context, *queue.Job) error { runs++; return nil }), queue.Job{Tenant: "acme", Type: "noop"})
			if err != nil || run.Err != nil || runs != 2 {
				t.Fatalf("the second Work: %+v, %v after %d runs; want one more", run, err, runs)
			}
		})
	}
}
