package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/throttle"
)

// TestWorkerUnknownDownstream: a job that names a downstream the worker
// does not know is archived at once, spending no retry, with a reason that
// names the downstream; the other jobs run.
func TestWorkerUnknownDownstream(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "call", Downstream: "nope", MaxRetry: 5}); err != nil {
			t.Fatal(err)
		}
		const n = 10
		for range n {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: "b", Type: "call", Downstream: "api"}); err != nil {
				t.Fatal(err)
			}
		}
		th := testThrottle(t, client, nil)
		d := Downstream{Limit: throttle.Limit{Rate: 1000}}
		rec := newRecorder()
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }}, rec)
		ins := asynq.NewInspectorFromRedisClient(client)
		waitFor(t, 30*time.Second, "the known jobs to run and the unknown one to fail", func() bool {
			info, err := ins.GetQueueInfo(srv.cfg.Queue)
			return rec.count() > n || rec.count() == n && err == nil && info.Archived+info.Retry > 0
		})
		rec.mu.Lock()
		for _, j := range rec.order {
			if j.Downstream != "api" {
				t.Errorf("the handler ran a job of downstream %q", j.Downstream)
			}
		}
		rec.mu.Unlock()
		tasks, err := ins.ListArchivedTasks(srv.cfg.Queue)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("archived: %d, %v", len(tasks), err)
		}
		if tasks[0].Retried != 0 || !strings.Contains(tasks[0].LastErr, `unknown downstream "nope"`) {
			t.Fatalf("archived after %d retries with %q; want at once, naming the downstream", tasks[0].Retried, tasks[0].LastErr)
		}
	})
}

// TestWorkerLeaseBusyPutsBack: a job whose downstream's every concurrency
// lease is held when its slot comes goes back to the waiting room, its
// tenant asleep with a "lease:" reason, spending no retry; it runs once the
// lease is given back.
func TestWorkerLeaseBusyPutsBack(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 100)
		th := testThrottle(t, client, nil)
		conc := throttle.Concurrency{Max: 1, Lease: time.Hour}
		d := Downstream{Limit: throttle.Limit{Rate: 1000, MaxWait: 50 * time.Millisecond}, Concurrency: &conc}
		lease, err := th.Acquire(context.Background(), "api", conc) // the key the job's throttle uses
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "call", Downstream: "api", MaxRetry: 3}); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th, Retention: time.Hour,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }}, rec)
		ins := asynq.NewInspectorFromRedisClient(client)
		var asleep []Sleeper
		waitFor(t, 30*time.Second, "the job put back, or failed", func() bool {
			asleep, _ = p.Sleepers(context.Background(), 10)
			info, err := ins.GetQueueInfo(srv.cfg.Queue)
			return len(asleep) > 0 || err == nil && info.Retry+info.Archived > 0
		})
		if info, err := ins.GetQueueInfo(srv.cfg.Queue); err != nil || info.Retry != 0 || info.Archived != 0 {
			t.Fatalf("asynq queue: %+v, %v; want nothing retried or archived", info, err)
		}
		if len(asleep) != 1 || asleep[0].Tenant != "a" || !strings.HasPrefix(asleep[0].Why, "lease: every concurrency slot of downstream api") {
			t.Fatalf("sleepers %+v; want tenant a held by the lease", asleep)
		}
		waitFor(t, 30*time.Second, "the put-back task completed with its reason", func() bool {
			tasks, err := ins.ListCompletedTasks(srv.cfg.Queue)
			return err == nil && len(tasks) > 0 && strings.HasPrefix(string(tasks[0].Result), "lease: ") &&
				strings.HasSuffix(string(tasks[0].Result), "(no retry spent)")
		})
		if n := rec.count(); n != 0 {
			t.Fatalf("the handler ran %d jobs while the only lease was held", n)
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the job to run once the lease is back", func() bool { return rec.count() == 1 })
		if r := rec.order[0].Retried(); r != 0 {
			t.Errorf("the job ran with %d retries spent; want 0", r)
		}
		if info, err := ins.GetQueueInfo(srv.cfg.Queue); err != nil || info.Archived != 0 || info.Retry != 0 || info.Failed != 0 {
			t.Fatalf("asynq queue: %+v, %v; want nothing archived, retried or failed", info, err)
		}
	})
}

// downHook makes the throttle's Redis unreachable (commands on keys under
// prefix fail as a refused connection would) until back is set.
type downHook struct {
	prefix string
	back   atomic.Bool // the throttle's Redis is reachable again
}

func (h *downHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *downHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *downHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasPrefix(s, h.prefix) && !h.back.Load() {
				err := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// TestWorkerThrottleDownNotAFailure: a job whose throttle cannot be asked
// (its Redis unreachable) is retried by asynq without counting a failure:
// no retry spent, nothing in the failed counters; it runs once the
// throttle answers. So is a job with no retries at all (MaxRetry -1),
// which asynq alone would archive, its retries used up.
func TestWorkerThrottleDownNotAFailure(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, maxRetry := range []int{3, -1} {
			t.Run(fmt.Sprintf("max_retry=%d", maxRetry), func(t *testing.T) { throttleDownNotAFailure(t, client, maxRetry) })
		}
	})
}

func throttleDownNotAFailure(t *testing.T, client redis.UniversalClient, maxRetry int) {
	cfg := testConfig(t, 100)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "call", Downstream: "api", MaxRetry: maxRetry}); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.KeyPrefix(t) + "th"
	hook := &downHook{prefix: prefix + ":"}
	client.AddHook(hook)
	th, err := throttle.New(client, &throttle.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	d := Downstream{Limit: throttle.Limit{Rate: 1000}}
	rec := newRecorder()
	srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th,
		Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }}, rec)
	ins := asynq.NewInspectorFromRedisClient(client)
	waitFor(t, 30*time.Second, "the job to be retried or archived", func() bool {
		info, err := ins.GetQueueInfo(srv.cfg.Queue)
		return err == nil && info.Retry+info.Archived > 0
	})
	if info, err := ins.GetQueueInfo(srv.cfg.Queue); err != nil || info.Retry != 1 || info.Failed != 0 || info.FailedTotal != 0 {
		t.Fatalf("asynq queue: %+v, %v; want the job retried, no failure counted", info, err)
	}
	tasks, err := ins.ListRetryTasks(srv.cfg.Queue)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("retry tasks: %d, %v", len(tasks), err)
	}
	task := tasks[0]
	if task.Retried != 0 || !strings.Contains(task.LastErr, "not a failure") || !strings.Contains(task.LastErr, "unreachable") {
		t.Fatalf("retry task: %d retries spent, last error %q; want none spent, not a failure", task.Retried, task.LastErr)
	}
	// The throttle answers again; run the retry now rather than
	// after asynq's backoff (15 s or more).
	hook.back.Store(true)
	if err := ins.RunTask(srv.cfg.Queue, task.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the retried job to run", func() bool { return rec.count() == 1 })
	if info, err := ins.GetQueueInfo(srv.cfg.Queue); err != nil || info.FailedTotal != 0 || info.Archived != 0 {
		t.Fatalf("asynq queue: %+v, %v; want no failure counted, nothing archived", info, err)
	}
}

// TestFailuresSpendRetries: a handler's failures spend the job's retries,
// counted across hand-overs (a Reschedule between two failures hands the
// job over anew), and the job is archived after its last allowed run
// fails: at once with MaxRetry -1; after three failures with MaxRetry 2.
func TestFailuresSpendRetries(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, tc := range []struct {
			maxRetry int
			runs     []string // what the handler does in each run
		}{
			{-1, []string{"fail"}},
			{2, []string{"fail", "reschedule", "fail", "fail"}},
		} {
			t.Run(fmt.Sprintf("max_retry=%d", tc.maxRetry), func(t *testing.T) {
				cfg := testConfig(t, 100)
				p, err := NewProducer(client, &cfg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "work", MaxRetry: tc.maxRetry}); err != nil {
					t.Fatal(err)
				}
				var run atomic.Int64
				rec := newRecorder()
				rec.err = func(*Job) error {
					n := run.Add(1)
					if tc.runs[min(n, int64(len(tc.runs)))-1] == "reschedule" {
						return Reschedule(0, "again")
					}
					return fmt.Errorf("boom %d", n)
				}
				srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1}, rec)
				ins := asynq.NewInspectorFromRedisClient(client)
				for i, what := range tc.runs {
					waitFor(t, 30*time.Second, fmt.Sprintf("run %d", i+1), func() bool { return rec.count() > i })
					if what != "fail" || i == len(tc.runs)-1 {
						continue
					}
					// Run the retry now rather than after asynq's backoff.
					var tasks []*asynq.TaskInfo
					waitFor(t, 30*time.Second, fmt.Sprintf("the retry after run %d", i+1), func() bool {
						tasks, err = ins.ListRetryTasks(srv.cfg.Queue)
						return err == nil && len(tasks) == 1
					})
					if err := ins.RunTask(srv.cfg.Queue, tasks[0].ID); err != nil {
						t.Fatal(err)
					}
				}
				var archived []*asynq.TaskInfo
				waitFor(t, 30*time.Second, "the job to be archived", func() bool {
					archived, err = ins.ListArchivedTasks(srv.cfg.Queue)
					return err == nil && len(archived) == 1
				})
				if got := rec.count(); got != len(tc.runs) {
					t.Fatalf("the handler ran %d times; want %d", got, len(tc.runs))
				}
				last := fmt.Sprintf("boom %d", len(tc.runs))
				if !strings.Contains(archived[0].LastErr, last) {
					t.Fatalf("archived with %q; want the last run's error, %q", archived[0].LastErr, last)
				}
			})
		}
	})
}

// TestHandlerNotNowSpendsNoRetry: a custom handler that paces its own
// calls returns the throttle's "not now" (a *throttle.TooFarError, a
// *throttle.BusyError, wrapped as an SDK would): the job goes back to the
// waiting room with no retry spent, even with none to spend, and runs
// again.
func TestHandlerNotNowSpendsNoRetry(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "work", MaxRetry: -1}); err != nil {
			t.Fatal(err)
		}
		var run atomic.Int64
		rec := newRecorder()
		rec.err = func(j *Job) error {
			switch run.Add(1) {
			case 1:
				return fmt.Errorf("crm: %w", &throttle.TooFarError{Key: "crm", RetryAfter: 10 * time.Millisecond})
			case 2:
				return fmt.Errorf("crm: %w", &throttle.BusyError{Key: "crm", InUse: 2, RetryAfter: 10 * time.Millisecond})
			}
			if j.Retried() != 0 {
				return fmt.Errorf("a retry was spent: %d", j.Retried())
			}
			return nil
		}
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1}, rec)
		waitFor(t, 30*time.Second, "the third run", func() bool { return rec.count() >= 3 })
		ins := asynq.NewInspectorFromRedisClient(client)
		waitFor(t, 30*time.Second, "the job to complete", func() bool {
			info, err := ins.GetQueueInfo(srv.cfg.Queue)
			return err == nil && info.Active == 0 && info.Pending == 0
		})
		if info, err := ins.GetQueueInfo(srv.cfg.Queue); err != nil || info.Archived != 0 || info.Retry != 0 || info.FailedTotal != 0 {
			t.Fatalf("asynq queue %+v, %v; want nothing archived, retried or failed", info, err)
		}
		if n := run.Load(); n != 3 {
			t.Fatalf("the handler ran %d times; want 3", n)
		}
	})
}
