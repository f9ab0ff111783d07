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
	"github.com/sluicehq/sluice/internal/scripts"
	"github.com/sluicehq/sluice/throttle"
)

// TestConcurrencyCapDoesNotStall: under a cap of one call in flight, with
// leases that would run for an hour if nobody gave them back, a backlog
// drains as fast as the handler gives its lease back: a job refused a
// lease goes back to the waiting room, and its tenant is woken by the
// next release (its sleep would otherwise last an hour).
func TestConcurrencyCapDoesNotStall(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		const n = 30
		for i := 0; i < n; i++ {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: fmt.Sprintf("t%d", i%3), Type: "call", Downstream: "api"}); err != nil {
				t.Fatal(err)
			}
		}
		th, err := throttle.New(client, &throttle.Options{Prefix: redistest.KeyPrefix(t) + "th", Subscribe: true})
		if err != nil {
			t.Fatal(err)
		}
		defer th.Close()
		d := Downstream{Limit: throttle.Limit{Rate: 1000, MaxWait: time.Minute},
			Concurrency: &throttle.Concurrency{Max: 1, Lease: time.Hour}}
		rec := newRecorder()
		inFlight, most := 0, 0
		rec.err = func(*Job) error {
			rec.mu.Lock()
			inFlight++
			most = max(most, inFlight)
			rec.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			rec.mu.Lock()
			inFlight--
			rec.mu.Unlock()
			return nil
		}
		srv, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 4, Throttle: th, PollInterval: 10 * time.Millisecond,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }})
		if err != nil {
			t.Fatal(err)
		}
		// A tenant put back for a lease wakes only when a release is
		// heard: without it, it would sleep for an hour.
		srv.leaseRecheck = time.Hour
		if err := srv.Start(rec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Shutdown)
		waitFor(t, 60*time.Second, fmt.Sprintf("%d capped jobs to run", n), func() bool { return rec.count() >= n })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if most != 1 {
			t.Fatalf("%d calls ran at once under a cap of 1", most)
		}
		ins := asynq.NewInspectorFromRedisClient(client)
		if info, err := ins.GetQueueInfo(srv.cfg.Queue); err != nil || info.Archived != 0 || info.Retry != 0 {
			t.Fatalf("asynq queue: %+v, %v; want nothing archived or retried", info, err)
		}
	})
}

// TestPoisonJobArchivedOthersFlow: a job that no slot can ever hold (its
// cost is above its downstream's burst, as when the policy changed after
// it was accepted) is archived with the reason, and the other tenants'
// jobs run.
func TestPoisonJobArchivedOthersFlow(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: "evil", Type: "call", Downstream: "api", Cost: 2, MaxRetry: 5}); err != nil {
				t.Fatal(err)
			}
		}
		const n = 20
		for range n {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: "good", Type: "call", Downstream: "api"}); err != nil {
				t.Fatal(err)
			}
		}
		th := testThrottle(t, client, nil)
		d := Downstream{Limit: throttle.Limit{Rate: 1000, Burst: 1}}
		rec := newRecorder()
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }}, rec)
		waitFor(t, 30*time.Second, "the good tenant's jobs to run", func() bool { return rec.count() >= n })
		ins := asynq.NewInspectorFromRedisClient(client)
		waitFor(t, 30*time.Second, "the poison jobs to be archived", func() bool {
			info, err := ins.GetQueueInfo(srv.cfg.Queue)
			return err == nil && info.Archived == 3
		})
		rec.mu.Lock()
		for _, j := range rec.order {
			if j.Tenant != "good" {
				t.Errorf("the handler ran a job of tenant %q", j.Tenant)
			}
		}
		rec.mu.Unlock()
		tasks, err := ins.ListArchivedTasks(srv.cfg.Queue)
		if err != nil || len(tasks) != 3 {
			t.Fatalf("archived: %d, %v", len(tasks), err)
		}
		for _, task := range tasks {
			if task.Retried != 0 || !strings.Contains(task.LastErr, "cost 2 with burst 1") {
				t.Errorf("archived after %d retries with %q; want at once, with the reason", task.Retried, task.LastErr)
			}
		}
	})
}

// TestCheckRefusesAtEnqueue: a job that Config.Check refuses is an
// invalid job, and nothing is written.
func TestCheckRefusesAtEnqueue(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 10)
		cfg.Check = func(j *Job) error {
			if j.Downstream != "api" {
				return fmt.Errorf("unknown downstream %q", j.Downstream)
			}
			return nil
		}
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Enqueue(context.Background(), Job{Tenant: "a", Type: "call", Downstream: "nope"})
		if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), `unknown downstream "nope"`) {
			t.Fatalf("refused job: %v; want ErrInvalidJob with the reason", err)
		}
		if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "call", Downstream: "api"}); err != nil {
			t.Fatal(err)
		}
		if st, err := p.Stats(context.Background()); err != nil || st.Depth != 1 {
			t.Fatalf("stats %+v, %v; want depth 1", st, err)
		}
	})
}

// scriptHook counts the scripts (EVALSHA and EVAL) a client runs.
type scriptHook struct{ calls atomic.Int64 }

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := strings.ToLower(cmd.Name()); (n == "evalsha" || n == "eval") && (err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT")) &&
			!(len(cmd.Args()) > 1 && cmd.Args()[1] == scripts.QueueAlive.Hash()) { // the heartbeat: a script a 100 ms, not a job
			h.calls.Add(1)
		}
		return err
	}
}

// TestThrottledJobsOneDecision: jobs paced by a downstream are handed over
// in batches while their key has budget, and the worker reserves each
// job's slot once: about four scripts per job in all (the claim's and
// clearing's share, asynq's enqueue at the hand-over, asynq's dequeue,
// the reservation, asynq's done), where peeking at dispatch, taking alone
// and reserving again made six.
func TestThrottledJobsOneDecision(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		const n = 300
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: fmt.Sprintf("t%d", i%3), Type: "call", Downstream: "api"}); err != nil {
				t.Fatal(err)
			}
		}
		th := testThrottle(t, client, nil)
		hook := &scriptHook{}
		client.AddHook(hook)
		d := Downstream{Limit: throttle.Limit{Rate: 2000}}
		rec := newRecorder()
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 10, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }}, rec)
		waitFor(t, 60*time.Second, "the jobs to run", func() bool { return rec.count() >= n })
		per := float64(hook.calls.Load()) / n
		t.Logf("%d throttled jobs, %.2f scripts a job", n, per)
		if per > 4.6 {
			t.Fatalf("%.2f scripts a throttled job; want about 4", per)
		}
	})
}

// TestSleepersSayWhy: a tenant skipped because its downstream is paused,
// and one whose next slot is too far away, are listed with the limit that
// holds each; a woken tenant is no longer listed.
func TestSleepersSayWhy(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 100)
		th := testThrottle(t, client, nil)
		paused := Downstream{Limit: throttle.Limit{Rate: 100, MaxWait: time.Second}}
		slow := Downstream{Limit: throttle.Limit{Rate: 1, Per: time.Hour, MaxWait: time.Second}}
		if _, err := th.Pause(context.Background(), "paused", paused.Limit, time.Hour); err != nil {
			t.Fatal(err)
		}
		for _, j := range []Job{{Tenant: "alice", Downstream: "paused"}, {Tenant: "bob", Downstream: "slow"}, {Tenant: "bob", Downstream: "slow"}} {
			j.Type = "call"
			if _, err := p.Enqueue(context.Background(), j); err != nil {
				t.Fatal(err)
			}
		}
		rec := newRecorder()
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) {
				switch name {
				case "paused":
					return paused, true
				case "slow":
					return slow, true
				}
				return Downstream{}, false
			}}, rec)
		var got []Sleeper
		waitFor(t, 20*time.Second, "both tenants asleep", func() bool {
			var err error
			got, err = p.Sleepers(context.Background(), 10)
			return err == nil && len(got) == 2
		})
		why := map[string]string{}
		for _, s := range got {
			why[s.Tenant] = s.Why
			if time.Until(s.Until) <= 0 {
				t.Errorf("%s sleeps until %v, in the past", s.Tenant, s.Until)
			}
		}
		if !strings.HasPrefix(why["alice"], "pause: downstream paused") || !strings.HasPrefix(why["bob"], "slot: downstream slow") {
			t.Fatalf("sleepers %+v; want alice held by the pause, bob by the slot", got)
		}
		if rec.count() != 1 {
			t.Fatalf("%d jobs ran; want bob's first", rec.count())
		}
	})
}

// TestSharedPrefetchWakesEveryProcess: two processes share a prefetch as
// large as their total concurrency (the demo's set-up). A dispatcher that
// finds the prefetch full waits for its own workers' starts to wake it;
// each process's starts must reach that mark before the other drains the
// pending list, or both wait for the recheck. Here the recheck is ten
// minutes away, so the jobs only run if the wakes come.
func TestSharedPrefetchWakesEveryProcess(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		for i := range n {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: fmt.Sprintf("t%d", i%4), Type: "noop"}); err != nil {
				t.Fatal(err)
			}
		}
		rec := newRecorder()
		for range 2 {
			s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 4, Prefetch: 8,
				PollInterval: 10 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			s.fullRecheck = 10 * time.Minute
			if err := s.Start(rec); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Shutdown)
		}
		waitFor(t, 60*time.Second, fmt.Sprintf("%d jobs to run", n), func() bool { return rec.count() >= n })
	})
}
