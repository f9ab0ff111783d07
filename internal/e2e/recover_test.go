package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestKilledWorkersCallsRunAgainSoon: a worker killed with SIGKILL while
// its 8 calls are in flight (the API holds every answer back) has each of
// them sent again by a second worker, with the same Idempotency-Key,
// through sluice's heartbeat rather than asynq's lease (30 s, then its
// recoverer's minute and a retry back-off). The time it took is logged,
// not checked: docs/reliability.md states the bound.
func TestKilledWorkersCallsRunAgainSoon(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	a := newAPI(t, downstreamtest.Config{Rate: 1000})
	f := newFleet(t, policyFor(a, 1000, ""), "-redis", "redis://"+srv.Addr()+"/0")
	first := f.start("-concurrency", "8")
	a.hold()
	ids := f.enqueueJobs(a.jobs("k", 8, []string{"t0", "t1", "t2", "t3"}))
	poll(t, 60*time.Second, func() bool { return a.inFlight() == 8 }, func() string {
		return fmt.Sprintf("%d calls in flight, waiting for 8", a.inFlight())
	})
	// The worker's heartbeat has written its 8 runs (every 100 ms at most).
	rdb := srv.Client(t)
	poll(t, 30*time.Second, func() bool {
		keys, err := rdb.Keys(context.Background(), "sluice:q:run:{"+queueName+"}:*").Result()
		if err != nil || len(keys) != 1 {
			return false
		}
		n, err := rdb.HLen(context.Background(), keys[0]).Result()
		return err == nil && n == 8
	}, func() string { return "the worker's heartbeat to list its 8 jobs" })
	first.kill()
	killed := time.Now()
	a.release()
	f.start("-concurrency", "8")
	poll(t, 60*time.Second, func() bool { return a.delivered(ids) == 8 }, func() string {
		return fmt.Sprintf("%d of 8 calls of the killed worker sent again and answered", a.delivered(ids))
	})
	t.Logf("the killed worker's 8 calls were answered again %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	keys := map[string]map[string]bool{}
	for _, c := range a.snapshot() {
		if keys[c.id] == nil {
			keys[c.id] = map[string]bool{}
		}
		keys[c.id][c.idem] = true
	}
	for _, id := range ids {
		if len(keys[id]) != 1 || keys[id][""] {
			t.Errorf("job %s's calls carried the Idempotency-Keys %v; want one", id, keys[id])
		}
	}
}
