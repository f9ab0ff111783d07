package queue

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestAsynqVersion: go.mod requires the asynq release that the hand-over's
// format was checked against (asynqVersion). An upgrade of asynq fails
// here until the format tests have passed on it and the constant is
// changed with it.
func TestAsynqVersion(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/hibiken/asynq (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no github.com/hibiken/asynq")
	}
	if got := string(m[1]); got != asynqVersion {
		t.Fatalf("go.mod requires asynq %s; the hand-over's format was checked against %s (queue.asynqVersion): "+
			"run TestAsynqReadsHandedOverTasks and TestHandOverWritesWhatAsynqWrites on %s, then change the constant",
			got, asynqVersion, got)
	}
}

// TestAsynqReadsHandedOverTasks: jobs enqueued by a Producer and handed
// over by the dispatcher read back through asynq's own Inspector with
// every field the hand-over writes: id, type, payload (the envelope),
// queue, retries, timeout, no deadline, retention, state. Together with
// TestHandOverWritesWhatAsynqWrites, which compares the bytes with
// asynq's Client, this is what an asynq upgrade must pass.
func TestAsynqReadsHandedOverTasks(t *testing.T) {
	jobs := []struct {
		job     Job
		retry   int
		timeout time.Duration
	}{
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
				for i, listed := range pending {
					job, err := decodeJob(listed.Payload)
					if err != nil {
						t.Fatalf("pending task %s: payload %q: %v", listed.ID, listed.Payload, err)
					}
					j := jobs[i]
					if job.ID != j.job.ID {
						t.Fatalf("pending task %d is job %s; want %s (the order of the enqueues)", i, job.ID, j.job.ID)
					}
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

// TestTaskMessageRetention: the Retention field is appended in asynq's
// whole seconds, and a zero or sub-second retention writes none.
func TestTaskMessageRetention(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{0, ""}, {time.Millisecond, ""}, {time.Second, "\x60\x01"}, {90 * time.Minute, "\x60" + string([]byte{0x98, 0x2a})}} {
		if got := retentionField(c.d); got != c.want {
			t.Errorf("retentionField(%v) = %s; want %s", c.d, strconv.Quote(got), strconv.Quote(c.want))
		}
	}
}
