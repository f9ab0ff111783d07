package queue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// TestHandlerSettlesItsSlot: the worker books a job's Units (not its
// Cost) on the downstream, hands the reservation to the handler, and a
// Settle there corrects the booking: 40 units estimated, 5 used.
func TestHandlerSettlesItsSlot(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 1000)
		th := testThrottle(t, client, nil)
		// 100 units a minute: one unit is 600ms of the bucket.
		lim := throttle.Limit{Name: "api", Rate: 100, Per: time.Minute, Burst: 100, Guard: -1, MaxWait: time.Minute}
		var (
			mu     sync.Mutex
			booked []int64 // the reservation's cost, -1 for none
		)
		h := HandlerFunc(func(ctx context.Context, j *Job) error {
			r, ok := Reservation(ctx)
			mu.Lock()
			if ok {
				booked = append(booked, r.Cost())
			} else {
				booked = append(booked, -1)
			}
			mu.Unlock()
			return Settle(ctx, 5) // without a slot: nothing to settle, no error
		})
		for _, j := range []Job{
			{Tenant: "a", Type: "call", Downstream: "api", Cost: 1, Units: 40},
			{Tenant: "b", Type: "call"},
		} {
			if _, err := p.Enqueue(context.Background(), j); err != nil {
				t.Fatal(err)
			}
		}
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return Downstream{Name: "api", Limit: lim}, name == "api" }}, h)
		waitFor(t, 20*time.Second, "2 jobs to run", func() bool { mu.Lock(); defer mu.Unlock(); return len(booked) == 2 })
		mu.Lock()
		got := append([]int64(nil), booked...)
		mu.Unlock()
		if (got[0] != 40 || got[1] != -1) && (got[0] != -1 || got[1] != 40) {
			t.Fatalf("reservations seen by the handler: %v; want 40 units for the job with a downstream, none for the other", got)
		}
		// Booked at 40 units the bucket would be 24s ahead; settled to 5,
		// 3s (less the time since).
		r, err := th.Peek(context.Background(), "api", lim, 100)
		if err != nil {
			t.Fatal(err)
		}
		if r.Delay > 3*time.Second || r.Delay < time.Second {
			t.Fatalf("bucket %v ahead after settling 40 units to 5; want at most 3s", r.Delay)
		}
	})
}

// TestUnitsValidated: Units is checked as Cost is.
func TestUnitsValidated(t *testing.T) {
	for _, u := range []int64{-1, MaxCost + 1} {
		err := (&Job{Tenant: "a", Type: "t", Units: u}).validate(1024)
		if !errors.Is(err, ErrInvalidJob) {
			t.Errorf("units %d: %v; want ErrInvalidJob", u, err)
		}
	}
	j, err := ParseJob([]byte(`{"tenant":"a","type":"t","cost":1,"units":500}`))
	if err != nil || j.Units != 500 || j.units() != 500 || j.cost() != 1 {
		t.Fatalf("ParseJob with units: %+v, %v", j, err)
	}
	if (&Job{Cost: 7}).units() != 7 {
		t.Fatal("units without Units is not the cost")
	}
}
