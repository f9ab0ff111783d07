package queue

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/scripts"
)

// dispatchLoop moves jobs from the waiting room into asynq until ctx ends.
func (s *Server) dispatchLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		wait, err := s.dispatchOne(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)
			s.log.Warn("sluice: dispatcher", "queue", s.cfg.Queue, "err", err, "retry_in", wait)
		} else {
			failures = 0
		}
		if wait <= 0 {
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-s.wake: // a job of this process started: room in the prefetch
			timer.Stop()
		}
	}
}

// dispatchBatch is the most jobs one claim takes.
const dispatchBatch = 32

// dispatchOne hands a batch of jobs to asynq. It returns how long to wait
// before the next attempt (0: go on at once).
func (s *Server) dispatchOne(ctx context.Context) (time.Duration, error) {
	k := s.keys
	peek := "0"
	if s.cfg.Throttle != nil {
		peek = "1"
	}
	v, err := scripts.QueueClaim.Run(ctx, s.client,
		[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.handed, k.envelopes},
		s.cfg.Prefetch, k.tenantPrefix, s.cfg.now(), dispatchBatch, peek).Slice()
	if err != nil {
		return 0, err
	}
	status, _ := v[0].(int64)
	switch status {
	case 2: // prefetch full: the workers are busy; a start wakes us
		return s.cfg.PollInterval, nil
	case 0: // nothing ready
		wait := s.cfg.PollInterval
		if us, ok := v[1].(int64); ok && us >= 0 && time.Duration(us)*time.Microsecond < wait {
			wait = time.Duration(us) * time.Microsecond
		}
		return wait, nil
	case 1: // a job to check against its throttle first
		enc, _ := v[1].(string)
		env, _ := v[2].(string)
		return 0, s.checkAndTake(ctx, enc, env)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	errs := make(chan error, len(v))
	for i := 2; i+1 < len(v); i += 2 {
		enc, _ := v[i].(string)
		env, _ := v[i+1].(string)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.handOverOrPutBack(ctx, enc, env); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return 0, <-errs
}

// checkAndTake peeks at the throttle of a job that names a downstream:
// the limit is checked before dequeue, so a tenant whose throttle is
// paused or whose next slot is too far away sleeps, costing nothing, while
// other tenants' jobs flow. Otherwise it takes the job and hands it over.
func (s *Server) checkAndTake(ctx context.Context, enc, env string) error {
	k := s.keys
	job, err := decodeJob([]byte(env))
	if err != nil {
		return err
	}
	if key, d, ok := s.throttleFor(job); ok {
		r, err := s.cfg.Throttle.Peek(ctx, key, d.Limit, job.cost())
		if err != nil {
			return err
		}
		if !r.OK {
			if err := scripts.QueueSleep.Run(ctx, s.client, []string{k.ring, k.sleep},
				enc, int64(r.RetryAfter/time.Microsecond)+1, s.cfg.now()).Err(); err != nil {
				return err
			}
			s.cfg.Metrics.slept(d.Limit.Name)
			return nil
		}
	}
	taken, err := scripts.QueueTake.Run(ctx, s.client, []string{k.tenantPrefix + enc, k.handed, k.envelopes}, env, job.key(), s.cfg.now()).Int()
	if err != nil || taken == 0 {
		return err // taken == 0: another dispatcher took it first
	}
	return s.handOverOrPutBack(ctx, enc, env)
}

// handOverOrPutBack hands a taken job to asynq, or puts it back where it
// was if asynq will not have it.
func (s *Server) handOverOrPutBack(ctx context.Context, enc, env string) error {
	k := s.keys
	job, err := decodeJob([]byte(env))
	if err != nil {
		return err
	}
	if err := s.handOver(ctx, job, env); err != nil {
		if perr := scripts.QueueUntake.Run(context.WithoutCancel(ctx), s.client,
			[]string{k.tenantPrefix + enc, k.handed, k.envelopes, k.ring, k.members, k.sleep, k.meta, k.tdepth, k.cdepth, k.ids},
			job.key(), env, enc, 0, s.cfg.now(), job.Class, job.ID).Err(); perr != nil {
			s.log.Error("sluice: job neither handed over nor put back; the recovery will put it back",
				"job", job.ID, "err", err, "put_back_err", perr)
		}
		return err
	}
	s.cfg.Metrics.handedOver(job)
	return nil
}

// handOver enqueues job into asynq under the task id of this hand-over. A
// task that exists already (a hand-over repeated after a crash) counts as
// handed over: the task id names this enqueue of the job (its nonce) and
// this hand-over (its moves), so no other job, not even one reusing the
// ID, can hold it.
func (s *Server) handOver(ctx context.Context, job *Job, env string) error {
	retry := job.maxRetry() - job.Retried
	if retry < 0 {
		retry = 0
	}
	_, err := s.asynq.EnqueueContext(ctx, asynq.NewTask(job.Type, []byte(env)),
		asynq.Queue(s.cfg.Queue), asynq.TaskID(job.taskID()), asynq.MaxRetry(retry),
		asynq.Timeout(job.timeout()), asynq.Retention(s.cfg.Retention))
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return nil
	}
	return err
}

// recoverLoop finds jobs handed over long ago and not started, and puts
// back those that asynq does not have (a dispatcher died between taking a
// job and handing it over).
func (s *Server) recoverLoop(ctx context.Context) {
	tick := time.NewTicker(s.cfg.StaleAfter / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if n, err := s.Recover(ctx); err != nil {
				s.log.Warn("sluice: recovering handed-over jobs", "queue", s.cfg.Queue, "err", err)
			} else if n > 0 {
				s.log.Info("sluice: put back jobs that asynq never got", "queue", s.cfg.Queue, "jobs", n)
			}
		}
	}
}

// Recover puts back into the waiting room the jobs handed over more than
// StaleAfter ago that asynq does not have, and forgets those asynq has
// finished without starting. It returns how many it put back. The server
// runs it periodically; tests and operators may call it.
func (s *Server) Recover(ctx context.Context) (int, error) {
	now, err := s.client.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	if s.cfg.Clock != nil {
		now = s.cfg.Clock()
	}
	k := s.keys
	cut := now.Add(-s.cfg.StaleAfter).UnixMicro()
	stale, err := s.client.ZRangeByScore(ctx, k.handed, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(cut, 10), Count: 100}).Result()
	if err != nil {
		return 0, err
	}
	put := 0
	for _, key := range stale {
		env, err := s.client.HGet(ctx, k.envelopes, key).Result()
		if errors.Is(err, redis.Nil) {
			continue // started meanwhile
		}
		if err != nil {
			return put, err
		}
		job, err := decodeJob([]byte(env))
		if err != nil {
			return put, err
		}
		enc, list, _ := k.tenant(job.Tenant)
		info, err := s.inspector.GetTaskInfo(s.cfg.Queue, job.taskID())
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			if err := scripts.QueueUntake.Run(ctx, s.client,
				[]string{list, k.handed, k.envelopes, k.ring, k.members, k.sleep, k.meta, k.tdepth, k.cdepth, k.ids},
				job.key(), env, enc, 0, s.cfg.now(), job.Class, job.ID).Err(); err != nil {
				return put, err
			}
			put++
		case err != nil:
			return put, err
		case info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived:
			// Finished without our start (a duplicate): count it out.
			if err := scripts.QueueStart.Run(ctx, s.client, []string{k.handed, k.envelopes, k.meta, k.tdepth, k.cdepth, k.ids},
				job.key(), enc, job.Class, job.ID).Err(); err != nil {
				return put, err
			}
		}
	}
	return put, nil
}
