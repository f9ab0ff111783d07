package queue

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestNumbersAsynqCannotHoldAreRefusedOrRoundedUp: asynq keeps a task's
// retries as an int32 and its timeout in whole seconds. A max_retry that
// with the queue's spare retry would not fit an int32 is refused at
// enqueue (it wrapped to a negative count, and 2^62 to 0), and a timeout is handed over rounded up to whole seconds (a
// timeout under a second was written as none, which asynq replaces by its
// own default, and 1.5 s as 1 s) (issue 19, finding 7).
func TestNumbersAsynqCannotHoldAreRefusedOrRoundedUp(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		for _, form := range []string{"entry"} {
			t.Run(form, func(t *testing.T) {
				cfg, p := testProducer(t, client, 100)
				for _, n := range []int{math.MaxInt32, 1 << 62, math.MaxInt} {
					_, err := p.Enqueue(ctx, Job{Tenant: "a", Type: "x", MaxRetry: n})
					if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), "max_retry") {
						t.Errorf("max_retry %d: %v; want ErrInvalidJob naming max_retry", n, err)
					}
				}
				want := map[string]struct {
					timeout time.Duration
					retry   int
				}{}
				for _, s := range []struct {
					id       string
					timeout  time.Duration
					maxRetry int
					asynq    time.Duration
				}{
					{"nano", time.Nanosecond, 0, time.Second},
					{"half", 500 * time.Millisecond, math.MaxInt32 - 1, time.Second},
					{"one-and-a-half", 1500 * time.Millisecond, 0, 2 * time.Second},
					{"two", 2 * time.Second, 0, 2 * time.Second},
					{"day-and-a-bit", 24*time.Hour + time.Millisecond, 0, 24*time.Hour + time.Second},
					{"default", 0, 0, 30 * time.Minute},
				} {
					if _, err := p.Enqueue(ctx, Job{ID: s.id, Tenant: "a", Type: "x", Timeout: s.timeout, MaxRetry: s.maxRetry}); err != nil {
						t.Fatalf("%s: %v", s.id, err)
					}
					retry := 25 + 1 // one spare (see item)
					if s.maxRetry != 0 {
						retry = s.maxRetry + 1
					}
					want[s.id] = struct {
						timeout time.Duration
						retry   int
					}{s.asynq, retry}
				}
				s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.dispatchOne(ctx); err != nil {
					t.Fatal(err)
				}
				// The Inspector reads only queues that asynq's own
				// servers have registered.
				if err := client.SAdd(ctx, "asynq:queues", cfg.Queue).Err(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { client.SRem(context.Background(), "asynq:queues", cfg.Queue) })
				ins := asynq.NewInspectorFromRedisClient(client)
				tasks, err := ins.ListPendingTasks(cfg.Queue)
				if err != nil {
					t.Fatal(err)
				}
				if len(tasks) != len(want) {
					t.Errorf("%d pending tasks; want %d", len(tasks), len(want))
				}
				for _, task := range tasks {
					scoped, _, _ := strings.Cut(strings.TrimPrefix(task.ID, "sluice:"), "@")
					_, id, _ := strings.Cut(scoped, "/")
					w, ok := want[id]
					if ok && (task.Timeout != w.timeout || task.MaxRetry != w.retry) {
						t.Errorf("job %s: asynq has timeout %v, max retry %d; want %v, %d", id, task.Timeout, task.MaxRetry, w.timeout, w.retry)
					}
				}
			})
		}
	})
}
