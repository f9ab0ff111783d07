package queue

import (
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/scripts"
	"github.com/sluicehq/sluice/throttle"
)

// publishEvery is how often a dispatcher that hands jobs over makes sure
// asynq lists the queue (asynq:queues), as asynq's Client does on its
// first enqueue: asynqmon and the Inspector only see listed queues.
const publishEvery = 10 * time.Second

// dispatchLoop moves jobs from the waiting room into asynq until ctx ends.
func (s *Server) dispatchLoop(ctx context.Context) {
	failures := 0
	var published time.Time
	for ctx.Err() == nil {
		if time.Since(published) > publishEvery {
			if err := s.client.SAdd(ctx, "asynq:queues", s.cfg.Queue).Err(); err == nil {
				published = time.Now()
			}
		}
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
		case <-s.wake: // jobs of this process left asynq's pending list
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
	s.startedHere.Store(0)
	args := []any{s.cfg.Prefetch, k.tenantPrefix, s.cfg.now(), dispatchBatch, peek, k.asynqTask, s.retention}
	keys := s.budgets.args(time.Now())
	for _, key := range keys {
		args = append(args, key, s.budgets.m[key].units)
	}
	v, err := scripts.QueueClaim.Run(ctx, s.client,
		[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.meta, k.cdepth, k.ids, k.asynqPending, k.why},
		args...).Slice()
	if err != nil {
		return 0, err
	}
	status, _ := v[0].(int64)
	switch status {
	case 2: // prefetch full: the workers are busy; their starts wake us
		return s.fullRecheck, nil
	case 0: // nothing ready
		wait := s.cfg.PollInterval
		if us, ok := v[1].(int64); ok && us >= 0 && time.Duration(us)*time.Microsecond < wait {
			wait = time.Duration(us) * time.Microsecond
		}
		return wait, nil
	case 1: // a job to check against its throttle first
		enc, _ := v[1].(string)
		it, _ := v[2].(string)
		return 0, s.checkAndTake(ctx, enc, it)
	case 4: // text that is no entry
		enc, _ := v[1].(string)
		text, _ := v[2].(string)
		return 0, s.handOverUndecodable(ctx, enc, text)
	}
	n, _ := v[1].(int64)
	s.cfg.Metrics.handedOver(int(n))
	for i, key := range keys {
		if left, ok := v[3+i].(int64); ok {
			s.budgets.spent(key, left)
		}
	}
	switch more, _ := v[2].(int64); more {
	case 1:
		return 0, nil
	case 2:
		// The prefetch is full: the workers' starts wake us when a
		// batch's worth of room has opened. Claiming on a timer instead
		// would hand over a job or two a claim, a script each.
		return s.fullRecheck, nil
	}
	// The ring has no more ready: look again after a poll.
	return s.cfg.PollInterval, nil
}


// checkAndTake peeks at the throttle of a job that names a downstream
// whose key has no budget left: the limit is checked before dequeue, so a
// tenant whose throttle is paused or whose next slot is too far away
// sleeps, costing nothing, while other tenants' jobs flow. Otherwise it
// takes the job and hands it over, and the key gets a budget: the units
// free within the horizon, less this job's, which later claims hand over
// in their batches without asking the throttle again.
func (s *Server) checkAndTake(ctx context.Context, enc, it string) error {
	k := s.keys
	// A job that cannot be read has no throttle to check: it is taken, and
	// asynq archives it, rather than stopping every claim behind it.
	job, err := decodeItem(it)
	if err != nil {
		job = &Job{}
	}
	if key, d, ok := s.throttleFor(job); ok {
		r, err := s.cfg.Throttle.Peek(ctx, key, d.Limit, job.cost())
		switch {
		case err != nil && neverFits(err):
			// No slot will ever hold it (the policy changed since its
			// enqueue): hand it over, and the worker archives it with
			// the reason, rather than stopping every claim behind it.
		case err != nil:
			return err
		case !r.OK:
			if err := scripts.QueueSleep.Run(ctx, s.client, []string{k.ring, k.sleep, k.why},
				enc, int64(r.RetryAfter/time.Microsecond)+1, s.cfg.now(), sleepText(job.Tenant, tooFar(job, r))).Err(); err != nil {
				return err
			}
			s.cfg.Metrics.slept(d.Limit.Name)
			return nil
		default:
			bkey := job.Downstream
			if d.PerTenant {
				bkey += "/" + enc
			}
			s.budgets.set(bkey, budgetFor(r, d.Limit, job.cost())-job.cost(), time.Now())
		}
	}
	taken, err := scripts.QueueTake.Run(ctx, s.client,
		[]string{k.tenantPrefix + enc, k.meta, k.cdepth, k.ids, k.asynqPending},
		it, s.cfg.now(), k.asynqTask, s.retention).Int()
	if err != nil || taken == 0 {
		return err // taken == 0: another dispatcher took it first
	}
	s.cfg.Metrics.handedOver(1)
	return nil
}

// undecodableType is the task type under which text found in a tenant's
// list that is no entry is handed to asynq.
const undecodableType = "sluice.undecodable"

// handOverUndecodable hands text at the head of a tenant's list that is no
// entry (no Producer writes such text; an operator or a bug might) to
// asynq in its place, as the payload of a task of type sluice.undecodable,
// rather than let it stop every claim behind it. The worker cannot decode
// it and asynq archives it, where asynqmon shows it.
func (s *Server) handOverUndecodable(ctx context.Context, enc, text string) error {
	k := s.keys
	j := Job{ID: "undecodable-" + randomHex(8), nonce: randomHex(8)}
	in := entry(defaultClass, undecodableType, []byte(text), j.taskID(), s.cfg.Queue, 0, int64(j.timeout()/time.Second))
	taken, err := scripts.QueueTake.Run(ctx, s.client,
		[]string{k.tenantPrefix + enc, k.meta, k.cdepth, k.ids, k.asynqPending},
		text, s.cfg.now(), k.asynqTask, s.retention, in).Int()
	if err != nil || taken == 0 {
		return err // taken == 0: another dispatcher took it first
	}
	s.log.Warn("sluice: dispatcher: text in a tenant's list is no job; handed to asynq to archive",
		"queue", s.cfg.Queue, "task", j.taskID())
	return nil
}

// budgetHorizon is how far ahead a budget looks: the units of a throttle
// key that are free within it (or within the downstream's MaxWait, if
// shorter) may be handed over without asking the throttle again, and the
// budget lasts as long.
const budgetHorizon = time.Second

// maxBudgets bounds the budgets sent with one claim.
const maxBudgets = 256

// budgetFor returns how many units of lim are free within the horizon,
// from a peek r for cost units that was OK: at least cost.
func budgetFor(r throttle.Reservation, lim throttle.Limit, cost int64) int64 {
	horizon := min(budgetHorizon, lim.WaitLimit())
	per := lim.Per
	if per <= 0 {
		per = time.Second
	}
	share := r.Share
	if share <= 0 || share > 1 {
		share = 1
	}
	interval := time.Duration(float64(per) / float64(lim.Rate) / share)
	if interval <= 0 || r.Delay >= horizon {
		return cost
	}
	return cost + int64((horizon-r.Delay)/interval)
}

// budgets are the units each throttle key may still hand over without a
// peek, learned from the last peek of the key. Only the dispatcher's
// goroutine uses them.
type budgets struct {
	m map[string]budget
}

type budget struct {
	units int64
	until time.Time
}

// args drops the budgets that ran out or expired by now and returns the
// keys of the others, the newest first (at most maxBudgets: the key of
// the job a claim just showed is always among them), for a claim.
func (b *budgets) args(now time.Time) []string {
	var keys []string
	for k, v := range b.m {
		if v.units <= 0 || !now.Before(v.until) {
			delete(b.m, k)
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) > maxBudgets {
		slices.SortFunc(keys, func(x, y string) int { return b.m[y].until.Compare(b.m[x].until) })
		keys = keys[:maxBudgets]
	}
	return keys
}

// set gives key a fresh budget.
func (b *budgets) set(key string, units int64, now time.Time) {
	if b.m == nil {
		b.m = make(map[string]budget)
	}
	b.m[key] = budget{units: units, until: now.Add(budgetHorizon)}
}

// spent records what a claim left of key's budget.
func (b *budgets) spent(key string, left int64) {
	if v, ok := b.m[key]; ok {
		v.units = left
		b.m[key] = v
	}
}
