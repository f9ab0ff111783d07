package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

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
	claimTaken = "taken" // {"taken", n, next, wait µs or -1, entry...}
	claimJunk  = "junk"  // {"junk", tenant, text, entry...}
	claimIdle  = "idle"  // {"idle", wait µs or -1}
	claimFull  = "full"  // {"full", pending}

	nextNow  = "now"  // claim again at once
	nextFull = "full" // the prefetch is full: the workers' starts wake us
)

// claim takes a batch of d's shard's jobs for the hand-over and hands
// them to asynq (handOver). It returns how long to wait before the next
// attempt (0: go on at once).
func (s *Server) claim(ctx context.Context, d *dispatcher) (time.Duration, error) {
	k := d.keys
	d.startedHere.Store(0)
	v, err := scripts.QueueClaim.Run(ctx, s.client,
		[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.meta, k.cdepth, k.ids, k.asynqPending, k.why, k.later, k.ldepth, k.full, k.held, k.handing},
		d.prefetch, k.tenantPrefix, s.cfg.now(), claimBatch, idHold.Microseconds(), handingStale.Microseconds()).Slice()
	if err != nil {
		return 0, err
	}
	status, _ := v[0].(string)
	if len(v) < 2 || (status == claimJunk && len(v) < 3) || (status == claimTaken && len(v) < 4) {
		return 0, fmt.Errorf("sluice: claim: unexpected reply %v", v)
	}
	switch status {
	case claimFull:
		return s.fullRecheck, nil
	case claimIdle:
		return s.pollWait(v[1]), nil
	case claimJunk:
		if err := s.handOver(ctx, k, v[3:]); err != nil {
			return 0, err
		}
		enc, _ := v[1].(string)
		text, _ := v[2].(string)
		return 0, s.handOverUndecodable(ctx, k, enc, text)
	case claimTaken:
		if err := s.handOver(ctx, k, v[4:]); err != nil {
			return 0, err
		}
		switch next, _ := v[2].(string); next {
		case nextNow:
			return 0, nil
		case nextFull:
			return s.fullRecheck, nil
		}
		return s.pollWait(v[3]), nil
	default:
		return 0, fmt.Errorf("sluice: claim: unknown reply %q", status)
	}
}

// handOver writes the asynq tasks of entries a claim took (queue_claim.lua)
// with asynq's Client, in the claim's order, then clears them from the
// shard's handing set (queue_handed.lua). A task asynq holds already (a
// claim took its entry again after a dispatcher died between the two
// steps) counts as written. An entry whose task could not be written
// stays in the handing set, for a later claim to take again after
// handingStale: none is lost.
func (s *Server) handOver(ctx context.Context, k keys, entries []any) error {
	if len(entries) == 0 {
		return nil
	}
	// A shutdown does not abandon a batch taken: it is written whole, or
	// until Redis fails to answer.
	ctx = context.WithoutCancel(ctx)
	done := make([]any, 0, 2*len(entries))
	var failed error
	for _, e := range entries {
		it, _ := e.(string)
		task, opts := s.taskOf(it, k.queue)
		_, err := s.asynq.EnqueueContext(ctx, task, opts...)
		if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
			failed = err
			break // Redis unreachable, most likely: the rest wait too
		}
		h, _, _ := readEntry(it)
		done = append(done, it, cmp.Or(h.class, defaultClass))
	}
	if len(done) > 0 {
		if err := scripts.QueueHanded.Run(ctx, s.client, []string{k.handing, k.meta, k.cdepth}, done...).Err(); err != nil {
			// The tasks are in asynq; a later claim takes their entries
			// again, and finds them there.
			return fmt.Errorf("sluice: clearing %d jobs handed to asynq: %w", len(done)/2, err)
		}
		s.metrics.handed.Add(float64(len(done) / 2))
	}
	if failed != nil {
		return fmt.Errorf("sluice: handing %d of %d jobs to asynq (they are handed again after %v): %w", len(entries)-len(done)/2, len(entries), handingStale, failed)
	}
	return nil
}

// taskOf returns the asynq task of an entry (asynqTask), or for an entry
// whose envelope is not a job's, or that handOverUndecodable wrote (its
// task id names no tenant), a task of undecodableType whose payload is
// that text, for the worker to refuse and asynq to archive.
func (s *Server) taskOf(it, queue string) (*asynq.Task, []asynq.Option) {
	h, env, _ := readEntry(it)
	scoped, _, _ := strings.Cut(h.task, "@")
	if job, err := decodeJob(env); err == nil && strings.Contains(scoped, "/") {
		return asynqTask(job, env, queue, s.cfg.Retention)
	}
	return asynq.NewTask(undecodableType, env), []asynq.Option{asynq.TaskID(h.task), asynq.Queue(queue), asynq.MaxRetry(0)}
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

// undecodableType is the task type under which text found in a tenant's
// list that is no entry is handed to asynq.
const undecodableType = "sluice.undecodable"

// handOverUndecodable hands text at the head of a tenant's list that is
// no entry to asynq in its place (queue_take.lua), as the payload of a
// task that the worker refuses and asynq archives, rather than let it
// stop every claim behind it. An entry stored by an older sluice
// (errOldEntry) is refused so, loudly.
func (s *Server) handOverUndecodable(ctx context.Context, k keys, enc, text string) error {
	j := Job{ID: "undecodable-" + randomHex(8), nonce: randomHex(8)}
	in := entry(defaultClass, "", j.taskID(), 1, []byte(text))
	taken, err := scripts.QueueTake.Run(ctx, s.client, []string{k.tenantPrefix + enc, k.handing}, text, s.cfg.now(), in).Int()
	if taken != 1 {
		return err
	}
	if err := s.handOver(ctx, k, []any{in}); err != nil {
		return err
	}
	why := "text in a tenant's list is no job"
	if strings.HasPrefix(text, oldEntryMarker) {
		why = errOldEntry.Error()
	}
	s.log.Error("sluice: dispatcher: "+why+"; handed to asynq to archive", "queue", k.queue, "task", j.taskID())
	return nil
}
