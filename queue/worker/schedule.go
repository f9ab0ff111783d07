package worker

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// scheduleEvery is how often the scheduler looks for due ticks.
const scheduleEvery = time.Second

// tickEnqueuer is what the scheduler needs of a queue.Producer.
type tickEnqueuer interface {
	EnqueueTick(ctx context.Context, schedule string, tick time.Time, job queue.Job) (queue.Receipt, error)
}

// The results a tick is counted under (sluice_schedule_ticks_total).
const (
	tickEnqueued = "enqueued" // this worker enqueued the tick's job
	tickTaken    = "taken"    // another worker (or this one, before) had it
	tickRefused  = "refused"  // the queue refused the job: the tick is spent
	tickMissed   = "missed"   // found later than its catch_up: skipped
	tickFailed   = "failed"   // Redis could not be asked: tried again
)

// scheduler enqueues the policy's periodic jobs. Every worker of a fleet
// runs one; each tick is claimed by one of them only, in the enqueue
// script's own step (queue.Producer.EnqueueTick), so that a tick runs
// once however many workers run and whichever of them stop. Missed ticks
// are not backfilled: of the ticks since the last one tried, only the
// latest is, and only within its schedule's catch_up (docs/policy.md,
// Periodic jobs). Not safe for concurrent use: one goroutine runs it.
type scheduler struct {
	producer  tickEnqueuer
	schedules []policy.Schedule
	now       func() time.Time
	log       *slog.Logger
	ticks     *prometheus.CounterVec // by schedule and result; nil for none

	mu     sync.Mutex  // step's state, which the page reads (status)
	next   []time.Time // per schedule, the next tick to try; zero: not yet known
	failed []bool      // per schedule, whether the pending tick failed once (logged)
	last   []tickSeen  // per schedule, the last tick tried and what became of it
}

// tickSeen is a tick as this worker last tried it.
type tickSeen struct {
	Tick   time.Time // zero: none tried yet
	Result string    // tickEnqueued, tickTaken, ...
	At     time.Time // when
	Err    string    // a refusal's or failure's reason
}

func newScheduler(p tickEnqueuer, schedules []policy.Schedule, now func() time.Time, log *slog.Logger, ticks *prometheus.CounterVec) *scheduler {
	return &scheduler{producer: p, schedules: schedules, now: now, log: log, ticks: ticks,
		next: make([]time.Time, len(schedules)), failed: make([]bool, len(schedules)), last: make([]tickSeen, len(schedules))}
}

// newTickCounter registers sluice_schedule_ticks_total on reg.
func newTickCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_schedule_ticks_total",
		Help: "Ticks of the policy's schedules as this worker saw them, by result: enqueued (by this worker), taken (by another), refused (by admission or the bound: the tick is spent), missed (later than catch_up), failed (Redis unreachable: tried again)."},
		[]string{"schedule", "result"})
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// run calls step every scheduleEvery until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	if len(s.schedules) == 0 {
		return
	}
	t := time.NewTicker(scheduleEvery)
	defer t.Stop()
	for {
		s.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// step tries, for each schedule, its latest tick not after now if it is
// newer than the last one tried.
func (s *scheduler) step(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	for i := range s.schedules {
		sc := &s.schedules[i]
		fresh := s.next[i].IsZero()
		if fresh {
			// The first tick at or after now less catch_up: a worker that
			// starts (or restarts) late still runs a tick that no other
			// worker ran, within catch_up.
			s.next[i] = sc.Next(now.Add(-sc.CatchUp - time.Nanosecond))
			if s.next[i].IsZero() {
				continue // an expression that never matches (Parse refuses one)
			}
		}
		if now.Before(s.next[i]) {
			continue
		}
		tick := s.next[i]
		for {
			n := sc.Next(tick)
			if n.IsZero() || n.After(now) {
				break
			}
			if !fresh {
				// Passed over for a later one: no backfill. At the start
				// the ticks before the latest within catch_up were other
				// workers' (or no worker's, before this one): not counted.
				s.count(sc.Name, tickMissed)
			}
			tick = n
		}
		if late := now.Sub(tick); late > sc.CatchUp {
			s.count(sc.Name, tickMissed)
			s.last[i] = tickSeen{Tick: tick, Result: tickMissed, At: now}
			s.log.Warn("sluice: schedule's tick missed: found later than its catch_up, skipped", "schedule", sc.Name,
				"tick", tick, "late", late.Round(time.Millisecond), "catch_up", sc.CatchUp)
			s.advance(i, tick)
			continue
		}
		job := sc.Job
		job.ID = "tick:" + sc.Name + ":" + strconv.FormatInt(tick.Unix(), 10)
		s.mu.Unlock() // the page reads the rest meanwhile
		_, err := s.producer.EnqueueTick(ctx, sc.Name, tick, job)
		s.mu.Lock()
		seen := tickSeen{Tick: tick, At: s.now().UTC()}
		if err != nil {
			seen.Err = err.Error()
		}
		var full *queue.QueueFullError
		var limited *queue.RateLimitedError
		switch {
		case err == nil:
			seen.Result = tickEnqueued
			s.count(sc.Name, tickEnqueued)
			s.log.Debug("sluice: schedule's tick enqueued", "schedule", sc.Name, "tick", tick, "id", job.ID)
		case errors.Is(err, queue.ErrTickTaken):
			seen.Result, seen.Err = tickTaken, ""
			s.count(sc.Name, tickTaken)
		case errors.As(err, &full), errors.As(err, &limited), errors.Is(err, queue.ErrDuplicateJob), errors.Is(err, queue.ErrInvalidJob):
			// The tick is spent (or, for an invalid job, would be refused
			// again): not retried.
			seen.Result = tickRefused
			s.count(sc.Name, tickRefused)
			s.log.Warn("sluice: schedule's tick refused by the queue, not retried", "schedule", sc.Name, "tick", tick, "err", err)
		case ctx.Err() != nil:
			return
		default:
			// Redis unreachable or out of memory: nothing was claimed, so
			// try again next step, while within catch_up.
			seen.Result = tickFailed
			s.last[i] = seen
			s.count(sc.Name, tickFailed)
			if !s.failed[i] {
				s.log.Warn("sluice: schedule's tick failed, trying again within its catch_up", "schedule", sc.Name, "tick", tick, "err", err)
			}
			s.failed[i], s.next[i] = true, tick
			continue
		}
		s.last[i] = seen
		s.advance(i, tick)
	}
}

// scheduleStatus is one schedule as the page shows it.
type scheduleStatus struct {
	Name, Spec string
	Tenant     string
	Next       time.Time // the next tick this worker will try
	Last       tickSeen
}

// status returns the schedules' next ticks and the last tick each was
// tried at, in the file's order.
func (s *scheduler) status() []scheduleStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UTC()
	out := make([]scheduleStatus, len(s.schedules))
	for i := range s.schedules {
		sc := &s.schedules[i]
		spec := sc.Cron
		if spec == "" {
			spec = "every " + sc.Every.String()
		}
		next := s.next[i]
		if next.IsZero() {
			next = sc.Next(now)
		}
		out[i] = scheduleStatus{Name: sc.Name, Spec: spec, Tenant: sc.Job.Tenant, Next: next, Last: s.last[i]}
	}
	return out
}

// advance moves schedule i past tick.
func (s *scheduler) advance(i int, tick time.Time) {
	s.next[i], s.failed[i] = s.schedules[i].Next(tick), false
}

func (s *scheduler) count(schedule, result string) {
	if s.ticks != nil {
		s.ticks.WithLabelValues(schedule, result).Inc()
	}
}
