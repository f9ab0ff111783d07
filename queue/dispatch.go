package queue

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/scripts"
	"github.com/sluicehq/sluice/throttle"
)

// dispatchLoop moves jobs from the waiting room into asynq until ctx ends.
func (s *Server) dispatchLoop(ctx context.Context) {
	failures := 0
	var published time.Time
	for ctx.Err() == nil {
		// asynqmon and the Inspector see only the queues asynq lists, as
		// its Client does on an enqueue.
		if time.Since(published) > 10*time.Second {
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

// dispatchOne hands a batch of jobs to asynq. It returns how long to wait
// before the next attempt (0: go on at once).
func (s *Server) dispatchOne(ctx context.Context) (time.Duration, error) {
	k := s.keys
	s.startedHere.Store(0)
	// ARGV as queue_claim.lua lists them: at most 32 jobs a claim; 1 to
	// show the dispatcher a job whose throttle it must peek at.
	peek := s.cfg.Throttle != nil
	args := []any{s.cfg.Prefetch, k.tenantPrefix, s.cfg.now(), 32, peek, k.asynqTask, s.retention}
	keys := liveBudgets(s.budgets, time.Now())
	for _, key := range keys {
		args = append(args, key, s.budgets[key].units)
	}
	v, err := scripts.QueueClaim.Run(ctx, s.client,
		[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.meta, k.cdepth, k.ids, k.asynqPending, k.why, k.later, k.ldepth},
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
	case 1, 4: // a job to check against its throttle first, or text that is no entry
		enc, _ := v[1].(string)
		it, _ := v[2].(string)
		if status == 4 {
			return 0, s.handOverUndecodable(ctx, enc, it)
		}
		return 0, s.checkAndTake(ctx, enc, it)
	}
	n, _ := v[1].(int64)
	s.metrics.handed.Add(float64(n))
	for i, key := range keys {
		if left, ok := v[3+i].(int64); ok {
			s.budgets[key].units = left
		}
	}
	switch more, _ := v[2].(int64); more {
	case 1: // more ready
		return 0, nil
	case 2: // the prefetch is full: the workers' starts wake us
		return s.fullRecheck, nil
	}
	return s.cfg.PollInterval, nil
}

// checkAndTake peeks at the throttle of a job whose downstream key has no
// budget left. If its slot is too far away, its tenant sleeps; else the
// job is handed over, and the key gets a budget (budgetFor) that later
// claims spend without asking the throttle (docs/queue.md, The
// dispatcher).
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
				enc, int64(r.RetryAfter/time.Microsecond)+1, s.cfg.now(), sleepText(job.Tenant, tooFar(job, r.Paused))).Err(); err != nil {
				return err
			}
			s.metrics.sleeps.WithLabelValues(d.Limit.Name).Inc()
			return nil
		default:
			bkey := job.Downstream
			if d.PerTenant {
				bkey += "/" + enc
			}
			s.budgets[bkey] = &budget{units: budgetFor(r, d.Limit, job.cost()) - job.cost(), until: time.Now().Add(budgetHorizon)}
		}
	}
	taken, err := s.take(ctx, enc, it)
	if taken {
		s.metrics.handed.Inc()
	}
	return err
}

// take runs queue_take.lua: it hands over the claimed text at the head of
// a tenant's list, or in (if given) in its place, unless another
// dispatcher took it first.
func (s *Server) take(ctx context.Context, enc, claimed string, in ...any) (bool, error) {
	k := s.keys
	taken, err := scripts.QueueTake.Run(ctx, s.client,
		[]string{k.tenantPrefix + enc, k.meta, k.cdepth, k.ids, k.asynqPending},
		append([]any{claimed, s.cfg.now(), k.asynqTask, s.retention}, in...)...).Int()
	return taken == 1, err
}

// undecodableType is the task type under which text found in a tenant's
// list that is no entry is handed to asynq.
const undecodableType = "sluice.undecodable"

// handOverUndecodable hands text at the head of a tenant's list that is no
// entry to asynq in its place, as the payload of a task that the worker
// refuses and asynq archives, rather than let it stop every claim behind
// it.
func (s *Server) handOverUndecodable(ctx context.Context, enc, text string) error {
	j := Job{ID: "undecodable-" + randomHex(8), nonce: randomHex(8)}
	in := entry(defaultClass, undecodableType, []byte(text), j.taskID(), s.cfg.Queue, 0, int64(j.timeout()/time.Second))
	if taken, err := s.take(ctx, enc, text, in); !taken {
		return err
	}
	s.log.Warn("sluice: dispatcher: text in a tenant's list is no job; handed to asynq to archive",
		"queue", s.cfg.Queue, "task", j.taskID())
	return nil
}

// budgetHorizon is how far ahead a budget looks (at most the
// downstream's MaxWait), and how long it lasts.
const budgetHorizon = time.Second

// maxBudgets bounds the budgets sent with one claim.
const maxBudgets = 256

// budgetFor returns how many units of lim are free within the horizon,
// from a peek r for cost units that was OK: at least cost.
func budgetFor(r throttle.Reservation, lim throttle.Limit, cost int64) int64 {
	horizon := min(budgetHorizon, lim.WaitLimit())
	per := cmp.Or(lim.Per, time.Second) // a Limit the throttle took has Per >= 0
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

// budget is how many units a throttle key may still hand over without a
// peek, and until when, learned from the key's last peek. Only the
// dispatcher's goroutine uses budgets.
type budget struct {
	units int64
	until time.Time
}

// liveBudgets drops the budgets that ran out or expired by now and
// returns the keys of the others, the newest first (at most maxBudgets:
// the key of the job a claim just showed is always among them).
func liveBudgets(m map[string]*budget, now time.Time) []string {
	var keys []string
	for k, v := range m {
		if v.units <= 0 || !now.Before(v.until) {
			delete(m, k)
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) > maxBudgets {
		slices.SortFunc(keys, func(x, y string) int { return m[y].until.Compare(m[x].until) })
		keys = keys[:maxBudgets]
	}
	return keys
}
