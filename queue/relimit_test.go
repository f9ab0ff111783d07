package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// TestTightenRebooksWaitingSlots: when a downstream's limits tighten
// (Tighten), the jobs asleep on slots booked at the old rate do not call
// then: they go back to the waiting room and book again at the new rate,
// so more slots are booked than jobs run; and every job still runs,
// once.
func TestTightenRebooksWaitingSlots(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		metrics, err := throttle.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		th := testThrottle(t, client, &throttle.Options{Metrics: metrics})
		var rate atomic.Int64
		rate.Store(20)
		ds := func(name string) (Downstream, bool) {
			return Downstream{Name: name, Limit: throttle.Limit{Name: "api", Rate: rate.Load(), MaxWait: 10 * time.Second}}, name == "api"
		}
		var mu sync.Mutex
		ran := map[string]int{}
		s := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 8, Throttle: th, Downstreams: ds}, HandlerFunc(func(ctx context.Context, job *Job) error {
			mu.Lock()
			ran[job.ID]++
			mu.Unlock()
			return nil
		}))
		const jobs = 30
		for i := range jobs {
			if _, err := p.Enqueue(context.Background(), Job{ID: fmt.Sprint("j", i), Tenant: fmt.Sprint("t", i%4), Type: "x", Downstream: "api"}); err != nil {
				t.Fatal(err)
			}
		}
		count := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(ran)
		}
		waitFor(t, 30*time.Second, "the first calls", func() bool { return count() >= 3 })
		rate.Store(100) // far above, so that the rebooked jobs run soon
		s.Tighten()
		waitFor(t, 60*time.Second, "every job", func() bool { return count() == jobs })
		mu.Lock()
		for id, n := range ran {
			if n != 1 {
				t.Errorf("job %s ran %d times", id, n)
			}
		}
		mu.Unlock()
		if granted := counterValue(t, reg, "sluice_throttle_reservations_total", "throttle", "api", "result", "granted"); granted <= jobs {
			t.Errorf("%v slots booked for %d jobs: the jobs asleep on slots at Tighten did not book again", granted, jobs)
		}
	})
}
