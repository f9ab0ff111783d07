package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/scripts"
)

// dispatcher feeds one shard of the waiting room to asynq.
type dispatcher struct {
	keys     keys
	prefetch int // the shard's share of ServerConfig.Prefetch
	// wake tells the dispatcher that wakeAfter jobs of this process have
	// left the shard's asynq pending list since its last claim
	// (startedHere), or that a tenant was woken.
	wake        chan struct{}
	startedHere atomic.Int64
	wakeAfter   int64
}

// poke wakes the dispatcher if it waits.
func (d *dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// dispatchLoop moves jobs from d's shard into asynq until ctx ends.
func (s *Server) dispatchLoop(ctx context.Context, d *dispatcher) {
	failures := 0
	var published time.Time
	for ctx.Err() == nil {
		// asynqmon and the Inspector see only the queues asynq lists, as
		// its Client does on an enqueue.
		if time.Since(published) > publishEvery {
			if err := s.client.SAdd(ctx, "asynq:queues", d.keys.queue).Err(); err == nil {
				published = time.Now()
			}
		}
		wait, err := s.claim(ctx, d)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = min(time.Duration(failures)*claimRetryStep, claimRetryMax)
			s.log.Warn("sluice: dispatcher", "queue", d.keys.queue, "err", err, "retry_in", wait)
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
		case <-d.wake:
			timer.Stop()
		}
	}
}

// The claim script's replies (queue_claim.lua).
const (
	claimTaken = "taken" // {"taken", n, next, wait µs or -1}
	claimJunk  = "junk"  // {"junk", tenant, text}
	claimIdle  = "idle"  // {"idle", wait µs or -1}
	claimFull  = "full"  // {"full", pending}

	nextNow  = "now"  // claim again at once
	nextFull = "full" // the prefetch is full: the workers' starts wake us
)

// claim hands a batch of d's shard's jobs to asynq. It returns how long
// to wait before the next attempt (0: go on at once).
func (s *Server) claim(ctx context.Context, d *dispatcher) (time.Duration, error) {
	k := d.keys
	d.startedHere.Store(0)
	v, err := scripts.QueueClaim.Run(ctx, s.client,
		[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.meta, k.cdepth, k.ids, k.asynqPending, k.why, k.later, k.ldepth, k.full, k.held},
		d.prefetch, k.tenantPrefix, s.cfg.now(), claimBatch, k.asynqTask, s.retention, idHold.Microseconds()).Slice()
	if err != nil {
		return 0, err
	}
	if len(v) < 2 {
		return 0, fmt.Errorf("sluice: claim: unexpected reply %v", v)
	}
	switch status, _ := v[0].(string); status {
	case claimFull:
		return s.fullRecheck, nil
	case claimIdle:
		return s.pollWait(v[1]), nil
	case claimJunk:
		enc, _ := v[1].(string)
		text, _ := v[2].(string)
		return 0, s.handOverUndecodable(ctx, k, enc, text)
	case claimTaken:
		n, _ := v[1].(int64)
		s.metrics.handed.Add(float64(n))
		switch next, _ := v[2].(string); next {
		case nextNow:
			return 0, nil
		case nextFull:
			return s.fullRecheck, nil
		}
		if len(v) < 4 {
			return s.cfg.PollInterval, nil
		}
		return s.pollWait(v[3]), nil
	default:
		return 0, fmt.Errorf("sluice: claim: unknown reply %q", status)
	}
}

// pollWait is how long a dispatcher waits before its next claim when the
// claim found nothing more to take now: until the next sleeping tenant
// wakes or job for later is due (us, in µs; -1: none), and at most a
// PollInterval.
func (s *Server) pollWait(us any) time.Duration {
	wait := s.cfg.PollInterval
	if us, ok := us.(int64); ok && us >= 0 {
		wait = min(wait, time.Duration(us)*time.Microsecond+wakeSlack)
	}
	return wait
}

// take runs queue_take.lua: it hands over the claimed text at the head of
// a tenant's list, or in (if given) in its place, unless another
// dispatcher took it first.
func (s *Server) take(ctx context.Context, k keys, enc, claimed string, in ...any) (bool, error) {
	taken, err := scripts.QueueTake.Run(ctx, s.client,
		[]string{k.tenantPrefix + enc, k.meta, k.cdepth, k.ids, k.asynqPending, k.held},
		append([]any{claimed, s.cfg.now(), k.asynqTask, s.retention, idHold.Microseconds()}, in...)...).Int()
	return taken == 1, err
}

// undecodableType is the task type under which text found in a tenant's
// list that is no entry is handed to asynq.
const undecodableType = "sluice.undecodable"

// handOverUndecodable hands text at the head of a tenant's list that is no
// entry to asynq in its place, as the payload of a task that the worker
// refuses and asynq archives, rather than let it stop every claim behind
// it.
func (s *Server) handOverUndecodable(ctx context.Context, k keys, enc, text string) error {
	j := Job{ID: "undecodable-" + randomHex(8), nonce: randomHex(8)}
	task := j.taskID()
	in := entry(defaultClass, "", task, 1, taskMessage(undecodableType, []byte(text), task, k.queue, 0, int64(j.timeout()/time.Second)))
	if taken, err := s.take(ctx, k, enc, text, in); !taken {
		return err
	}
	s.log.Warn("sluice: dispatcher: text in a tenant's list is no job; handed to asynq to archive",
		"queue", k.queue, "task", j.taskID())
	return nil
}
