package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// abandon leaves s as SIGKILL would: its heartbeat and dispatchers stop,
// its keys stay, and its running jobs are never finished.
func (s *Server) abandon() {
	s.alive.stop()
	<-s.alive.done
	s.cancel()
}

// TestDeadWorkersJobsRunAgain: a worker abandoned while running two jobs
// (its handler blocks, its heartbeat stops) has them run again by a
// second worker, each once, with the same scoped id (the built-in HTTP
// job's Idempotency-Key) and payload, long before asynq's lease would
// expire: the first worker's asynq server still holds them.
func TestDeadWorkersJobsRunAgain(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 1000)
		ctx := context.Background()
		want := map[string]string{}
		for i := range 2 {
			job := Job{ID: fmt.Sprint("call", i), Tenant: fmt.Sprint("t", i), Type: "x", Payload: []byte(fmt.Sprint("body", i))}
			if _, err := p.Enqueue(ctx, job); err != nil {
				t.Fatal(err)
			}
			want[job.ScopedID()] = string(job.Payload)
		}
		var mu sync.Mutex
		inA, inB := map[string]int{}, map[string]string{}
		runsB := 0
		stuck := make(chan struct{})
		a := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, DeadAfter: time.Second}, handlerFunc(func(ctx context.Context, job *Job) error {
			mu.Lock()
			inA[job.ScopedID()]++
			mu.Unlock()
			<-stuck
			return nil
		}))
		t.Cleanup(func() { close(stuck) }) // before a's Shutdown
		waitFor(t, 30*time.Second, "both jobs running on the first worker", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(inA) == 2
		})
		// Let a's heartbeat write its runs, then kill it.
		waitFor(t, 30*time.Second, "the first worker's runs written", func() bool {
			n, err := client.HLen(ctx, a.alive.run).Result()
			return err == nil && n == 2
		})
		a.abandon()
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, DeadAfter: time.Second}, handlerFunc(func(ctx context.Context, job *Job) error {
			mu.Lock()
			defer mu.Unlock()
			inB[job.ScopedID()] = string(job.Payload)
			runsB++
			return nil
		}))
		waitFor(t, 60*time.Second, "both jobs run again on the second worker", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(inB) == 2
		})
		mu.Lock()
		defer mu.Unlock()
		for id, body := range want {
			if inB[id] != body {
				t.Errorf("job %s ran again with payload %q, want %q", id, inB[id], body)
			}
		}
		if runsB != 2 {
			t.Errorf("the second worker ran %d jobs, want 2", runsB)
		}
		if n, err := client.ZCard(ctx, a.alive.recovered).Result(); err != nil || n != 2 {
			t.Errorf("recovered marks: %d, %v; want 2", n, err)
		}
		if n, _ := client.Exists(ctx, a.alive.run).Result(); n != 0 {
			t.Errorf("the dead worker's runs are still there")
		}
	})
}

// TestRecoveredTaskCompletesOnce: asynq's own recovery of a task whose job
// was put back (a retry of it: n > 0) completes it without running, once;
// a first run (n = 0) or an unmarked task runs.
func TestRecoveredTaskCompletesOnce(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, _ := testProducer(t, client, 1000)
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		if err := client.ZAdd(context.Background(), s.alive.recovered, redis.Z{Score: 1, Member: "task-1"}).Err(); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		task := asynq.NewTask("x", nil)
		if s.recoveredElsewhere(ctx, task, "task-1", 0) {
			t.Fatal("a first run was completed unrun")
		}
		if !s.recoveredElsewhere(ctx, task, "task-1", 1) {
			t.Fatal("a recovered task's retry ran")
		}
		if s.recoveredElsewhere(ctx, task, "task-1", 2) {
			t.Fatal("a recovered task was completed unrun twice")
		}
		if s.recoveredElsewhere(ctx, task, "task-2", 1) {
			t.Fatal("an unmarked task was completed unrun")
		}
	})
}
