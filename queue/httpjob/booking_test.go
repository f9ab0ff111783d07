package httpjob

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestCallBookedOnce: the job's call goes out on the slot the worker
// booked for the job (one a minute, the only one): the Transport books no
// second one.
func TestCallBookedOnce(t *testing.T) {
	th := newThrottle(t)
	var calls atomic.Int64
	api := httptestServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
	}))
	lim := throttle.Limit{Name: "api", Rate: 1, Per: time.Minute, MaxWait: time.Second}
	h := &Handler{Throttle: th, Resolve: func(*queue.Job, string) (queue.Downstream, error) {
		return queue.Downstream{Limit: lim}, nil
	}}
	job := func() error {
		key := queue.ThrottleKey(&queue.Job{Tenant: "t", Downstream: "api"}, false)
		r, err := th.Reserve(context.Background(), key, lim, 1)
		if err != nil || !r.OK {
			t.Fatalf("the worker's slot: %v, %v", r, err)
		}
		ctx := queue.WithReservation(context.Background(), th, r)
		return h.ProcessJob(ctx, &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "api",
			Payload: []byte(`{"url":"` + api + `/v1/orders"}`)})
	}
	if err := job(); err != nil || calls.Load() != 1 {
		t.Fatalf("a job on its slot: %v after %d calls; want it sent, booked once", err, calls.Load())
	}
	// A call without the worker's slot books its own: the next is a
	// minute away, beyond max_wait, and sluice's refusal reaches the
	// worker as the *throttle.TooFarError that puts the job back.
	err := h.ProcessJob(context.Background(), &queue.Job{ID: "j", Tenant: "t", Type: Type, Downstream: "api",
		Payload: []byte(`{"url":"` + api + `/v1/orders"}`)})
	var far *throttle.TooFarError
	if calls.Load() != 1 || !errors.As(err, &far) {
		t.Fatalf("a job without its slot: %v after %d calls; want sluice's TooFarError, nothing sent", err, calls.Load())
	}
}
