package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
)

// TestEnqueueTickOnce: eight producers race for each of 20 ticks of one
// schedule; exactly one job a tick gets in, the rest are ErrTickTaken,
// and an older tick is refused once a newer one is claimed. On a queue
// of 4 shards, so that on the cluster the ticks hash lives beside the
// tenant's keys whatever its slot.
func TestEnqueueTickOnce(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		cfg.Shards = 4
		ctx := context.Background()
		producers := make([]*Producer, 8)
		for i := range producers {
			p, err := NewProducer(client, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			producers[i] = p
		}
		base := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
		for n := range 20 {
			tick := base.Add(time.Duration(n) * time.Minute)
			var mu sync.Mutex
			won, taken := 0, 0
			var wg sync.WaitGroup
			for _, p := range producers {
				wg.Go(func() {
					_, err := p.EnqueueTick(ctx, "nightly", tick, Job{Tenant: "acme", Type: "report"})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						won++
					case errors.Is(err, ErrTickTaken):
						taken++
					default:
						t.Errorf("tick %d: %v", n, err)
					}
				})
			}
			wg.Wait()
			if won != 1 || taken != len(producers)-1 {
				t.Fatalf("tick %d: %d producers enqueued it and %d were refused; want 1 and %d", n, won, taken, len(producers)-1)
			}
		}
		st, err := producers[0].Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Depth != 20 {
			t.Errorf("depth %d after 20 ticks, want 20", st.Depth)
		}
		// An older tick, and the same tick again, are refused; another
		// schedule's ticks are its own.
		for _, tick := range []time.Time{base, base.Add(19 * time.Minute)} {
			if _, err := producers[1].EnqueueTick(ctx, "nightly", tick, Job{Tenant: "acme", Type: "report"}); !errors.Is(err, ErrTickTaken) {
				t.Errorf("tick %v again: %v, want ErrTickTaken", tick, err)
			}
		}
		if _, err := producers[1].EnqueueTick(ctx, "hourly", base, Job{Tenant: "acme", Type: "report"}); err != nil {
			t.Errorf("another schedule's tick: %v", err)
		}
	})
}

// TestEnqueueTickSpentWhenRefused: a tick whose job admission refuses
// stays claimed (it is tried once across the fleet), and a job Check
// refuses claims nothing.
func TestEnqueueTickSpentWhenRefused(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		pol := algorithms.Policy{Algorithm: algorithms.FixedWindow, Limit: 1, Period: time.Hour}
		cfg.Tenants = func(string) TenantPolicy { return TenantPolicy{Admission: &pol} }
		cfg.Check = func(job *Job) error {
			if job.Type == "bad" {
				return fmt.Errorf("no worker runs %q", job.Type)
			}
			return nil
		}
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := p.Enqueue(ctx, Job{Tenant: "acme", Type: "x"}); err != nil { // spends the tenant's limit
			t.Fatal(err)
		}
		tick := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
		var rl *RateLimitedError
		if _, err := p.EnqueueTick(ctx, "s", tick, Job{Tenant: "acme", Type: "x"}); !errors.As(err, &rl) {
			t.Fatalf("tick over the tenant's limit: %v, want a *RateLimitedError", err)
		}
		if _, err := p.EnqueueTick(ctx, "s", tick, Job{Tenant: "acme", Type: "x"}); !errors.Is(err, ErrTickTaken) {
			t.Fatalf("the refused tick again: %v, want ErrTickTaken", err)
		}
		next := tick.Add(time.Minute)
		if _, err := p.EnqueueTick(ctx, "s", next, Job{Tenant: "acme", Type: "bad"}); !errors.Is(err, ErrInvalidJob) {
			t.Fatalf("an invalid job: %v, want ErrInvalidJob", err)
		}
		if _, err := p.EnqueueTick(ctx, "s", next, Job{Tenant: "acme", Type: "x"}); errors.Is(err, ErrTickTaken) || !errors.As(err, &rl) {
			t.Fatalf("the tick an invalid job left: %v, want it unclaimed (a *RateLimitedError)", err)
		}
		if _, err := p.EnqueueTick(ctx, "bad name!", next, Job{Tenant: "acme", Type: "x"}); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("a bad schedule name: %v, want ErrInvalidJob", err)
		}
	})
}
