// Package queuetest runs a queue.Handler in a test as a worker of the
// queue runs it, and lists what it enqueued, as rivertest does for river.
//
// A Queue is a waiting room on a Redis of its own (an in-process
// miniredis unless Options.Client names one) with a Producer for the code
// under test. Work hands one job to a real queue.Server and returns what
// the handler returned: the handler gets the job as a worker gives it
// (its tenant, downstream, Retried and Refusals, EnqueuedAt) and the
// worker's context (the job's timeout; the slot of its downstream, booked
// at its Units, which queue.Settle corrects). Waiting lists a tenant's
// jobs that wait in the queue: what the handler enqueued.
package queuetest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// Options configures New. A nil *Options means defaults.
type Options struct {
	// Client is the Redis to use. Nil starts a miniredis of the Queue's
	// own, which Close stops. On a Redis that others use, give the Queue
	// a Config.Prefix of its own: Close deletes nothing.
	Client redis.UniversalClient
	// Config is the queue's: Queue defaults to "queuetest", Bound to
	// 10,000; the rest as in queue.Config.
	Config queue.Config
	// Downstreams are the downstreams the worker knows, by name; a job
	// naming one has its slot booked on a Throttle of the Queue's own
	// before its handler runs, as in a worker.
	Downstreams map[string]queue.Downstream
	// Timeout bounds each Work: how long it waits for the handler to be
	// given the job and return. Default one minute.
	Timeout time.Duration
}

// Queue is a queue for a test. Close it when done.
type Queue struct {
	// Producer enqueues on the queue: give it to the code under test.
	Producer *queue.Producer

	client  redis.UniversalClient
	mini    *miniredis.Miniredis // nil when Options.Client was given
	cfg     queue.Config
	th      *throttle.Throttle
	ds      map[string]queue.Downstream
	timeout time.Duration
	work    *queue.Producer // the queue Work hands its jobs over from
	workCfg queue.Config
}

// New returns a Queue on opts.Client, or on a miniredis of its own.
func New(opts *Options) (*Queue, error) {
	if opts == nil {
		opts = &Options{}
	}
	q := &Queue{client: opts.Client, cfg: opts.Config, ds: opts.Downstreams, timeout: opts.Timeout}
	if q.timeout <= 0 {
		q.timeout = time.Minute
	}
	if q.cfg.Queue == "" {
		q.cfg.Queue = "queuetest"
	}
	if q.cfg.Bound == 0 {
		q.cfg.Bound = 10000
	}
	if q.client == nil {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return nil, fmt.Errorf("queuetest: starting miniredis: %w", err)
		}
		q.mini, q.client = m, redis.NewClient(&redis.Options{Addr: m.Addr()})
	}
	var err error
	if q.Producer, err = queue.NewProducer(q.client, &q.cfg); err != nil {
		q.Close()
		return nil, err
	}
	// Work's jobs wait in a queue of their own, so that the jobs a handler
	// enqueues on Producer stay waiting for Waiting to list.
	q.workCfg = q.cfg
	q.workCfg.Queue = q.cfg.Queue[:min(len(q.cfg.Queue), 59)] + "-work"
	q.workCfg.Shards, q.workCfg.TenantBound, q.workCfg.Tenants, q.workCfg.Check = 1, 0, nil, nil
	if q.work, err = queue.NewProducer(q.client, &q.workCfg); err != nil {
		q.Close()
		return nil, err
	}
	if q.th, err = throttle.New(q.client, &throttle.Options{Prefix: cmp.Or(q.cfg.Prefix, queue.DefaultPrefix) + ":th"}); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// Close stops the Queue's throttle, and its miniredis if it started one.
func (q *Queue) Close() error {
	if q.th != nil {
		q.th.Close()
	}
	if q.mini != nil {
		q.client.Close()
		q.mini.Close()
	}
	return nil
}

// Run is one run of a handler, as Work reports it.
type Run struct {
	// Job is the job as the handler was given it.
	Job *queue.Job
	// Err is what the handler returned.
	Err error
}

// Work enqueues job, hands it to a queue.Server whose handler is h, and
// returns once h has returned, with what it returned: nil, an error,
// queue.Reschedule's or queue.Refused's. The job runs once: the Server
// does not act on the error (no retry, no put-back), so the next Work
// starts clean. A job that names a downstream of Options.Downstreams
// waits for its slot as in a worker (a slot beyond max_wait goes back to
// the waiting room until it is near). The error is Work's own: the job
// could not be enqueued, or was not run within Options.Timeout.
func (q *Queue) Work(ctx context.Context, h queue.Handler, job queue.Job) (Run, error) {
	r, err := q.work.Enqueue(ctx, job)
	if err != nil {
		return Run{}, fmt.Errorf("queuetest: enqueue: %w", err)
	}
	ran := make(chan Run, 1)
	s, err := queue.NewServer(q.client, &queue.ServerConfig{
		Queue: q.workCfg.Queue, Prefix: q.workCfg.Prefix, Shards: q.workCfg.Shards, Concurrency: 1, Throttle: q.th,
		Downstreams: func(name string) (queue.Downstream, bool) {
			d, ok := q.ds[name]
			return d, ok
		},
		PollInterval: 10 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return Run{}, err
	}
	err = s.Start(queue.HandlerFunc(func(ctx context.Context, j *queue.Job) error {
		err := h.ProcessJob(ctx, j)
		if j.ID == r.ID {
			select {
			case ran <- Run{Job: j, Err: err}:
			default:
			}
		}
		return nil
	}))
	if err != nil {
		return Run{}, err
	}
	defer s.Shutdown()
	timer := time.NewTimer(q.timeout)
	defer timer.Stop()
	select {
	case run := <-ran:
		return run, nil
	case <-timer.C:
		return Run{}, fmt.Errorf("queuetest: job %s was not run within %v", r.ID, q.timeout)
	case <-ctx.Done():
		return Run{}, ctx.Err()
	}
}

// Waiting returns tenant's jobs waiting in the queue, enqueued on
// Producer and not handed over (a Queue hands over only Work's): due ones
// in order, then those for later (queue.Producer.Waiting).
func (q *Queue) Waiting(ctx context.Context, tenant string) ([]queue.Job, error) {
	return q.Producer.Waiting(ctx, tenant, 0)
}
