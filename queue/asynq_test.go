package queue

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestAsynqReadsHandedOverTasks: jobs enqueued by a Producer and handed
// over by the dispatcher read back through asynq's own Inspector with
// every field the hand-over sets (asynqTask): id, type, payload (the
// envelope), queue, retries, timeout, no deadline, retention, state. The
// waiting room holds none of asynq's format: this is what an asynq
// upgrade must pass.
func TestAsynqReadsHandedOverTasks(t *testing.T) {
	type testJob struct {
		job     Job
		retry   int
		timeout time.Duration
	}
	jobs := []testJob{
		{Job{ID: "defaults", Tenant: "a", Type: "x"}, 26, 30 * time.Minute}, // one retry spare (see item)
		{Job{ID: "no-retry", Tenant: "b", Type: "sluice.http", MaxRetry: -1, Payload: []byte(`{"url":"https://api.example.com/"}`)}, 1, 30 * time.Minute},
		{Job{ID: "some-retries", Tenant: "c d", Type: "y:z", MaxRetry: 3, Timeout: 26 * time.Hour, Payload: bytes.Repeat([]byte("q"), 20000)}, 4, 26 * time.Hour},
		{Job{ID: "seconds", Tenant: "e", Type: "y", Timeout: 9999 * time.Millisecond, Downstream: "shop", Cost: 3}, 26, 10 * time.Second},
	}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, retention := range []time.Duration{0, 90 * time.Minute} {
			t.Run("retention="+retention.String(), func(t *testing.T) {
				ctx := context.Background()
				cfg, p := testProducer(t, client, 100)
				want := map[string]Job{}
				for _, j := range jobs {
					if _, err := p.Enqueue(ctx, j.job); err != nil {
						t.Fatal(err)
					}
					want[j.job.ID] = j.job
				}
				s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Retention: retention})
				if err != nil {
					t.Fatal(err)
				}
				// The dispatcher's loop, without asynq's workers: the
				// tasks stay pending for the Inspector.
				dctx, stop := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { defer close(done); s.dispatchLoop(dctx, s.disp[0]) }()
				ins := asynq.NewInspectorFromRedisClient(client)
				var pending []*asynq.TaskInfo
				waitFor(t, 10*time.Second, "the jobs to be handed over", func() bool {
					pending, err = ins.ListPendingTasks(cfg.Queue)
					return err == nil && len(pending) == len(jobs)
				})
				stop()
				<-done
				for _, listed := range pending {
					job, err := decodeJob(listed.Payload)
					if err != nil {
						t.Fatalf("pending task %s: payload %q: %v", listed.ID, listed.Payload, err)
					}
					i := slices.IndexFunc(jobs, func(j testJob) bool { return j.job.ID == job.ID })
					if i < 0 {
						t.Fatalf("pending task %s is job %s, not enqueued", listed.ID, job.ID)
					}
					j := jobs[i]
					ti, err := ins.GetTaskInfo(cfg.Queue, listed.ID)
					if err != nil {
						t.Fatal(err)
					}
					if ti.ID != "sluice:"+job.ScopedID()+"@"+job.nonce+":0" || !strings.Contains(ti.ID, "/"+job.ID+"@") || len(job.nonce) != 16 {
						t.Errorf("job %s: task id %q", job.ID, ti.ID)
					}
					if ti.Type != j.job.Type || ti.Queue != cfg.Queue || ti.State != asynq.TaskStatePending {
						t.Errorf("job %s: type %q queue %q state %v", job.ID, ti.Type, ti.Queue, ti.State)
					}
					if !bytes.Equal(ti.Payload, listed.Payload) || job.Tenant != j.job.Tenant || !bytes.Equal(job.Payload, j.job.Payload) ||
						job.Downstream != j.job.Downstream || job.Cost != j.job.Cost {
						t.Errorf("job %s: payload decodes to %+v", job.ID, job)
					}
					if ti.MaxRetry != j.retry || ti.Retried != 0 {
						t.Errorf("job %s: max retry %d, retried %d; want %d, 0", job.ID, ti.MaxRetry, ti.Retried, j.retry)
					}
					if ti.Timeout != j.timeout || !ti.Deadline.IsZero() {
						t.Errorf("job %s: timeout %v, deadline %v; want %v and none", job.ID, ti.Timeout, ti.Deadline, j.timeout)
					}
					if ti.Retention != retention {
						t.Errorf("job %s: retention %v; want %v", job.ID, ti.Retention, retention)
					}
					delete(want, job.ID)
				}
				if len(want) != 0 {
					t.Errorf("jobs not handed over: %v", want)
				}
			})
		}
	})
}
