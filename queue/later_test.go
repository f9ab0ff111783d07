package queue

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testClock is a clock that tests move by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// pendingJobs returns the ids of the jobs in asynq's pending list, in the
// order asynq takes them.
func pendingJobs(t *testing.T, client redis.UniversalClient, k keys) []string {
	t.Helper()
	tasks, err := client.LRange(context.Background(), k.asynqPending, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range slices.Backward(tasks) { // asynq pops from the right
		_, scoped, _ := strings.Cut(strings.TrimPrefix(task, "sluice:"), "/")
		id, _, _ := strings.Cut(scoped, "@")
		ids = append(ids, id)
	}
	return ids
}

// TestJobsForLater: a job due later waits apart from its tenant's list:
// the tenant's due jobs, enqueued after it, go first; it counts against
// the bounds from its enqueue and keeps its id taken; when its time comes
// it joins the tail of its tenant's list, behind the jobs already there.
func TestJobsForLater(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		clock := &testClock{now: time.Now().Add(time.Hour).Truncate(time.Second)}
		t0 := clock.Now()
		cfg := testConfig(t, 100)
		cfg.TenantBound = 3
		cfg.clock = clock.Now
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		enqueue := func(id, tenant string, runAt time.Time) {
			t.Helper()
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: tenant, Type: "x", RunAt: runAt}); err != nil {
				t.Fatalf("enqueue %s: %v", id, err)
			}
		}
		enqueue("late", "a", t0.Add(10*time.Second))
		enqueue("now1", "a", time.Time{})
		enqueue("b-late", "b", t0.Add(5*time.Second))
		enqueue("past", "b", t0.Add(-time.Minute)) // a past time is due at once

		st, err := p.Stats(ctx)
		if err != nil || st.Depth != 4 || st.Later != 2 {
			t.Fatalf("stats %+v, %v; want depth 4 with 2 for later", st, err)
		}
		if n, err := p.TenantDepth(ctx, "a"); err != nil || n != 2 {
			t.Fatalf("a's backlog %d, %v; want 2 (one due, one for later)", n, err)
		}
		// Its id stays taken while it waits for its time.
		var dup *DuplicateJobError
		if _, err := p.Enqueue(ctx, Job{ID: "late", Tenant: "a", Type: "x"}); !errors.As(err, &dup) {
			t.Fatalf("the id of a job for later enqueued again: %v; want a DuplicateJobError", err)
		}
		// The tenant bound counts jobs for later: a has 2 of 3.
		enqueue("a3", "a", t0.Add(time.Hour))
		var full *QueueFullError
		if _, err := p.Enqueue(ctx, Job{Tenant: "a", Type: "x"}); !errors.As(err, &full) || full.Tenant != "a" {
			t.Fatalf("a's fourth job: %v; want its tenant bound of 3 to refuse it", err)
		}

		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Prefetch: 100})
		if err != nil {
			t.Fatal(err)
		}
		claim := func() {
			t.Helper()
			if _, err := s.dispatchOne(ctx); err != nil {
				t.Fatal(err)
			}
		}
		claim()
		if got := pendingJobs(t, client, s.shards[0]); !slices.Equal(got, []string{"now1", "past"}) {
			t.Fatalf("handed over %v; want the due jobs now1 and past only", got)
		}
		clock.Add(5 * time.Second)
		claim()
		if got := pendingJobs(t, client, s.shards[0]); !slices.Equal(got, []string{"now1", "past", "b-late"}) {
			t.Fatalf("handed over %v at 5s; want b-late to follow", got)
		}
		// At 9s a due job of a's; at 10s "late" joins a's list behind it.
		clock.Add(4 * time.Second)
		if _, err := p.Enqueue(ctx, Job{ID: "now2", Tenant: "a", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		clock.Add(time.Second)
		claim()
		if got := pendingJobs(t, client, s.shards[0]); !slices.Equal(got, []string{"now1", "past", "b-late", "now2", "late"}) {
			t.Fatalf("handed over %v at 10s; want now2, then late", got)
		}
		st, err = p.Stats(ctx)
		if err != nil || st.Later != 1 || st.Depth != 6 || st.HandedOver != 5 {
			t.Fatalf("stats %+v, %v; want a3 alone for later, 5 handed over", st, err)
		}
		if n, err := p.TenantDepth(ctx, "a"); err != nil || n != 1 {
			t.Fatalf("a's backlog %d, %v; want 1 (a3)", n, err)
		}
	})
}

// TestRunAtChecks: run_at and run_in as POST /enqueue and enqueue -f
// take them, and the furthest a job may wait.
func TestRunAtChecks(t *testing.T) {
	j, err := ParseJob([]byte(`{"tenant":"a","type":"x","run_at":"2030-01-02T03:04:05Z"}`))
	if err != nil || !j.RunAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("run_at: %v, %v", j.RunAt, err)
	}
	before := time.Now()
	j, err = ParseJob([]byte(`{"tenant":"a","type":"x","run_in":"10m"}`))
	if err != nil || j.RunAt.Before(before.Add(10*time.Minute)) || j.RunAt.After(time.Now().Add(10*time.Minute)) {
		t.Fatalf("run_in: %v, %v", j.RunAt, err)
	}
	for _, bad := range []string{
		`{"tenant":"a","type":"x","run_at":"2030-01-02T03:04:05Z","run_in":"1m"}`,
		`{"tenant":"a","type":"x","run_at":"tomorrow"}`,
		`{"tenant":"a","type":"x","run_in":"-1m"}`,
		`{"tenant":"a","type":"x","run_in":"soon"}`,
	} {
		if _, err := ParseJob([]byte(bad)); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: %v; want ErrInvalidJob", bad, err)
		}
	}
	job := Job{Tenant: "a", Type: "x", RunAt: time.Now().Add(MaxDelay + time.Hour)}
	if err := job.validate(DefaultMaxPayload); !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), "run_at") {
		t.Fatalf("a job %v ahead: %v; want it refused", MaxDelay+time.Hour, err)
	}
}

// TestJobsForLaterNeverEarly: jobs for later, run by a server on the real
// clock, never start before their time, and all start. Their lateness is
// logged, not asserted (bench/ measures it under load).
func TestJobsForLaterNeverEarly(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 100)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		const n = 30
		due := map[string]time.Time{}
		start := time.Now()
		for i := range n {
			id := "j" + string(rune('a'+i%26)) + string(rune('0'+i/26))
			due[id] = start.Add(time.Duration(200+40*i) * time.Millisecond)
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: []string{"x", "y", "z"}[i%3], Type: "x", RunAt: due[id]}); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		late := map[string]time.Duration{}
		h := HandlerFunc(func(ctx context.Context, j *Job) error {
			mu.Lock()
			defer mu.Unlock()
			late[j.ID] = time.Since(due[j.ID])
			return nil
		})
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 4}, h)
		waitFor(t, 30*time.Second, "every job for later to run", func() bool { mu.Lock(); defer mu.Unlock(); return len(late) == n })
		mu.Lock()
		defer mu.Unlock()
		var worst time.Duration
		for id, d := range late {
			if d < 0 {
				t.Errorf("job %s started %v before its time", id, -d)
			}
			worst = max(worst, d)
		}
		t.Logf("%d jobs for later: the latest started %v after its time", n, worst)
	})
}
