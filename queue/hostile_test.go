package queue

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// TestHostileTenantSlowsNobody: tenant mallory tries every way one
// tenant's jobs could slow another's at once: a backlog of 300 jobs,
// jobs whose cost no slot can hold (the policy changed after they were
// accepted), jobs whose handler hangs until their timeout, jobs whose
// handler fails, payloads at the size limit, and alice's own job ids.
// Alice then enqueues 10 jobs. Every one of them runs, with her own
// payload, behind a bounded number of mallory's jobs: those asynq already
// held when she arrived, and a round or so of the ring. The bound counts
// jobs, not seconds (docs/fairness.md). Mallory's poison jobs are
// archived, not retried.
func TestHostileTenantSlowsNobody(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 10_000)
		cfg.MaxPayload = 4096
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat([]byte("m"), cfg.MaxPayload)
		enqueue := func(j Job) {
			t.Helper()
			if _, err := p.Enqueue(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 300 {
			j := Job{Tenant: "mallory", Type: "work", Payload: big, Timeout: time.Second, MaxRetry: -1}
			switch i % 6 {
			case 0:
				j.Type, j.Downstream, j.Cost = "call", "api", 5 // no slot holds it
			case 1:
				j.Type = "hang"
			case 2:
				j.Type = "fail"
			case 3:
				j.ID = fmt.Sprintf("order-%d", i/6) // alice's ids
			}
			enqueue(j)
		}
		th := testThrottle(t, client, nil)
		api := Downstream{Limit: throttle.Limit{Rate: 1000, Burst: 1}}

		var mu sync.Mutex
		var malloryRuns, aliceRuns, malloryAtAlice, malloryAtLastAlice int
		payloads := map[string]string{}
		h := HandlerFunc(func(ctx context.Context, j *Job) error {
			mu.Lock()
			if j.Tenant == "mallory" {
				malloryRuns++
			} else {
				aliceRuns++
				payloads[j.ID] = string(j.Payload)
				malloryAtLastAlice = malloryRuns
			}
			mu.Unlock()
			switch j.Type {
			case "hang":
				<-ctx.Done()
				return ctx.Err()
			case "fail":
				return fmt.Errorf("mallory's job fails")
			}
			return nil
		})
		const concurrency = 4
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: concurrency, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return api, name == "api" }}, h)
		waitFor(t, 60*time.Second, "mallory's backlog to be draining", func() bool { mu.Lock(); defer mu.Unlock(); return malloryRuns >= 20 })
		mu.Lock()
		malloryAtAlice = malloryRuns
		mu.Unlock()
		for i := range 10 {
			enqueue(Job{ID: fmt.Sprintf("order-%d", i), Tenant: "alice", Type: "work", Payload: []byte("alice's " + fmt.Sprint(i))})
		}
		waitFor(t, 120*time.Second, "alice's 10 jobs", func() bool { mu.Lock(); defer mu.Unlock(); return aliceRuns >= 10 })
		mu.Lock()
		defer mu.Unlock()
		for i := range 10 {
			id := fmt.Sprintf("order-%d", i)
			if want := "alice's " + fmt.Sprint(i); payloads[id] != want {
				t.Errorf("alice's %s ran with payload %.40q; want %q", id, payloads[id], want)
			}
		}
		// While both have work, mallory gets every other turn: about 10
		// of her jobs beside alice's 10, plus what asynq held (the
		// prefetch) and what a claim under way handed over (the prefetch
		// again) when alice arrived, plus the workers' own.
		ahead := malloryAtLastAlice - malloryAtAlice
		bound := 10 + 2*srv.cfg.Prefetch + concurrency + 4
		t.Logf("%d of mallory's jobs ran from alice's arrival to her last job (bound %d)", ahead, bound)
		if ahead > bound {
			t.Fatalf("%d of mallory's jobs ran while alice's 10 waited; want at most %d", ahead, bound)
		}
		ins := asynq.NewInspectorFromRedisClient(client)
		tasks, err := ins.ListArchivedTasks(srv.cfg.Queue, asynq.PageSize(500))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			if task.Retried != 0 {
				t.Errorf("archived after %d retries: %s", task.Retried, task.LastErr)
			}
		}
	})
}
