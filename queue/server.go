package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"

	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/scripts"
	"github.com/sluicehq/sluice/throttle"
)

// Downstream is one third-party API that jobs call: how the fleet paces
// its calls and, for the built-in HTTP job (queue/httpjob), where and how
// to send them. The policy file describes each one (queue/policy).
type Downstream struct {
	// Name is the downstream's name, as jobs give it.
	Name string
	// Limit paces the downstream fleet-wide (Limit.Name labels metrics).
	Limit throttle.Limit
	// Concurrency, when set, caps the downstream's calls in flight.
	Concurrency *throttle.Concurrency
	// PerTenant gives each tenant its own bucket at Limit (per-account
	// quotas, such as Shopify's per store), instead of one shared bucket.
	PerTenant bool
	// BaseURL is the prefix of every URL the built-in HTTP job may call
	// for this downstream; nil: HTTP jobs cannot use it.
	BaseURL *url.URL
	// Timeout bounds the built-in HTTP job's request; default 30s.
	Timeout time.Duration
	// Headers are set on every built-in HTTP job's request, over the
	// job's own (its credentials). The values are secrets: never logged.
	Headers map[string]string
	// MaxRefusals is how many times the downstream may refuse one job for
	// its rate (a handler's Refused: the built-in HTTP job's 429 or 503)
	// before the job is archived; 0 means DefaultMaxRefusals.
	MaxRefusals int
	// CostFrom, when set, is where the built-in HTTP job reads the call's
	// real cost in the response, to settle its slot (Settle).
	CostFrom CostFrom
}

// DefaultMaxRefusals is a Downstream's MaxRefusals unless it sets one:
// with the downstream's pacing right a refusal is rare, and a job refused
// 10 times is one the downstream will not take (a path that always
// answers 429). Each refusal also pauses the downstream fleet-wide for
// its Retry-After: the bound caps what one such job costs everyone.
const DefaultMaxRefusals = 10

// ServerConfig configures a Server.
type ServerConfig struct {
	// Config names the waiting room (Queue, Prefix).
	Config
	// Concurrency is the number of jobs this process runs at once;
	// default 10.
	Concurrency int
	// Prefetch is how many tasks asynq's pending list may hold, fleet-wide,
	// before the dispatcher hands more jobs over; default 3 × Concurrency.
	// Keep it at least the fleet's total concurrency.
	Prefetch int
	// Throttle paces jobs that name a Downstream; nil runs them unpaced.
	Throttle *throttle.Throttle
	// Downstreams returns the throttling of a downstream by name.
	Downstreams func(name string) (Downstream, bool)
	// ShutdownTimeout is how long Shutdown lets running jobs finish;
	// default 30s. Jobs still running then return to asynq's queue.
	ShutdownTimeout time.Duration
	// Retention keeps completed asynq tasks this long (whole seconds),
	// with their results, for asynqmon and the Inspector. Default 0:
	// deleted on completion, as asynq does.
	Retention time.Duration
	// PollInterval is how often an idle dispatcher looks for work, and how
	// often an idle process's asynq servers look at their pending list,
	// between them (each server's TaskCheckInterval is PollInterval times
	// their number); default 50ms. A job enqueued on an idle queue waits
	// about one PollInterval (docs/queue.md, The dispatcher).
	PollInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Metrics; nil for none.
	Metrics *Metrics
}

// Server runs jobs: asynq's server, the dispatcher that feeds it from the
// waiting room, and the throttle before each handler.
type Server struct {
	client redis.UniversalClient
	cfg    ServerConfig
	shards shards
	// disp are the dispatchers, one a shard.
	disp      []*dispatcher
	retention string   // cfg.Retention, encoded (retentionField)
	metrics   *Metrics // cfg.Metrics, or collectors registered nowhere
	// srv are asynq's servers, Concurrency shared between them (takers).
	srv    []*asynq.Server
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// fullRecheck is how long a dispatcher that found the prefetch full
	// waits for that wake before it looks again.
	fullRecheck time.Duration
	// leaseRecheck is the longest a tenant sleeps when its job found
	// every concurrency lease held; a release heard wakes it sooner.
	leaseRecheck time.Duration
	leaseWaits   leaseWaits
	runCtx       context.Context // Start's: ends at Shutdown
	forget       *forgetter      // the records of completed jobs (records.go)
}

// takers is how many asynq servers a Server runs for a concurrency: one
// for every 8 goroutines, at most 8, each with its share. asynq's
// processor takes its tasks one at a time, one Redis round trip each, so
// one server caps a process at one task a round trip whatever its
// concurrency: in the scale benchmark (bench/cmd/scale, nolimit10k: 4
// processes × 32) a server a process delivered 5,300-5,400 jobs a second
// and four a process 6,800-8,500 (docs/queue.md, Hand-over).
func takers(concurrency int) int {
	return max(1, min(8, (concurrency+7)/8))
}

// errNotFailure marks errors that are not the job's fault (Redis
// unreachable, shutting down): asynq retries without counting a failure.
var errNotFailure = errors.New("sluice: not a failure")

// NewServer returns a Server on client for *opts (nil: the defaults).
func NewServer(client redis.UniversalClient, opts *ServerConfig) (*Server, error) {
	if client == nil {
		return nil, errors.New("sluice: queue.NewServer: nil client")
	}
	var cfg ServerConfig
	if opts != nil {
		cfg = *opts
	}
	cfg.Bound = cmp.Or(cfg.Bound, 1) // the bound is the producers' business; the server does not check it
	if err := cfg.Config.fill(); err != nil {
		return nil, err
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 10)
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("sluice: Concurrency must be positive, got %d", cfg.Concurrency)
	}
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 3*cfg.Concurrency)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, 30*time.Second)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 50*time.Millisecond)
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("sluice: Retention must not be negative, got %v", cfg.Retention)
	}
	s := &Server{client: client, cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()),
		fullRecheck: 4 * cfg.PollInterval, leaseRecheck: time.Second,
		retention: retentionField(cfg.Retention), shards: newShards(cfg.Prefix, cfg.Queue, cfg.Shards), metrics: cfg.Metrics}
	s.forget = newForgetter(client, s.shards)
	queues := map[string]int{}
	for i, k := range s.shards {
		// Each shard's share of the prefetch, and a quarter of it
		// (docs/queue.md, The dispatcher).
		prefetch := int(s.shards.bound(int64(cfg.Prefetch), i))
		if prefetch < 1 {
			prefetch = 1
		}
		s.disp = append(s.disp, &dispatcher{keys: k, prefetch: prefetch, wake: make(chan struct{}, 1),
			wakeAfter: int64(max(1, min(prefetch/4, 2*cfg.Concurrency)))})
		queues[k.queue] = 1
	}
	if s.metrics == nil {
		s.metrics, _ = NewMetrics(nil, cfg.Queue)
	}
	n := takers(cfg.Concurrency)
	for i := range n {
		share := cfg.Concurrency / n // and one more for the first Concurrency % n
		if i < cfg.Concurrency%n {
			share++
		}
		s.srv = append(s.srv, asynq.NewServerFromRedisClient(client, asynq.Config{
			Concurrency:     share,
			Queues:          queues,
			ShutdownTimeout: cfg.ShutdownTimeout,
			LogLevel:        asynq.WarnLevel,
			// The dispatcher keeps asynq's pending list short, so an idle
			// worker must look again soon, not after asynq's default second;
			// the servers between them look once a PollInterval, as one
			// would.
			TaskCheckInterval: time.Duration(n) * cfg.PollInterval,
			IsFailure:         func(err error) bool { return !errors.Is(err, errNotFailure) },
		}))
	}
	return s, nil
}

// Start starts processing with h and returns; Shutdown stops.
func (s *Server) Start(h Handler) error {
	ctx, cancel := context.WithCancel(context.Background())
	s.runCtx = ctx
	if err := checkShards(ctx, s.client, s.cfg.Prefix, s.cfg.Queue, s.cfg.Shards); err != nil {
		cancel()
		return err
	}
	// Hand the first batch over before asynq's processor first looks (and
	// then sleeps a PollInterval), so that a worker starts on a backlog at
	// once. A failure here is the dispatcher's to retry.
	for _, d := range s.disp {
		if _, err := s.claim(ctx, d); err != nil {
			s.log.Warn("sluice: dispatcher: first claim", "queue", d.keys.queue, "err", err)
		}
	}
	run := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if t.Type() == undecodableType { // see handOverUndecodable
			s.left(ctx)
			return fmt.Errorf("%w: text found in a tenant's list that is no job", asynq.SkipRetry)
		}
		return s.process(ctx, t, h)
	})
	for i, srv := range s.srv {
		if err := srv.Start(run); err != nil {
			for _, started := range s.srv[:i] {
				started.Shutdown()
			}
			cancel()
			return fmt.Errorf("sluice: starting asynq: %w", err)
		}
	}
	s.cancel = cancel
	s.wg.Add(1 + len(s.disp))
	for _, d := range s.disp {
		go func() { defer s.wg.Done(); s.dispatchLoop(ctx, d) }()
	}
	go func() { defer s.wg.Done(); s.sampleLoop(ctx) }()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.forget.loop(ctx) }()
	return nil
}

// Shutdown stops the dispatcher, then lets running jobs finish for up to
// ShutdownTimeout; unfinished ones go back to asynq's queue. No job is
// lost.
func (s *Server) Shutdown() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	// Each asynq server waits up to ShutdownTimeout for its own jobs: all
	// at once, so that the wait is one ShutdownTimeout, not one a server.
	var stopping sync.WaitGroup
	for _, srv := range s.srv {
		stopping.Add(1)
		go func() { defer stopping.Done(); srv.Shutdown() }()
	}
	stopping.Wait()
	s.leaseWaits.wg.Wait()
	s.forget.flush(context.Background())
}

// throttleFor returns the throttle key and settings for job, if it names
// a downstream the server knows and the server has a throttle.
func (s *Server) throttleFor(job *Job) (string, Downstream, bool) {
	d, ok := Downstream{}, false
	if job.Downstream != "" && s.cfg.Throttle != nil && s.cfg.Downstreams != nil {
		d, ok = s.cfg.Downstreams(job.Downstream)
	}
	d.Limit.Name = cmp.Or(d.Limit.Name, job.Downstream)
	return ThrottleKey(job, d.PerTenant), d, ok
}

// ThrottleKey returns the throttle key a job's slots are taken from: its
// downstream's name, or for a per-tenant quota of a job the server runs,
// "{" + its tenant's shard's asynq queue + "}" + the downstream's name +
// "/" + the encoded tenant, a key in the hash slot of the tenant's shard,
// where the claim books its slots (docs/throttle.md, Slots booked by the
// claim). Handlers that pause the downstream after a 429 pause this key.
// For a job the server did not run, ask the server (Server.ThrottleKey).
func ThrottleKey(job *Job, perTenant bool) string {
	if !perTenant {
		return job.Downstream
	}
	if job.shard != "" {
		if k := "{" + job.shard + "}" + job.Downstream + "/" + job.tenantEnc; keyspace.Tagged(k) {
			return k
		}
	}
	return job.Downstream + "/" + job.Tenant
}

// process runs one asynq task: throttle, start, handler.
func (s *Server) process(ctx context.Context, t *asynq.Task, h Handler) (err error) {
	n, _ := asynq.GetRetryCount(ctx)
	first := n == 0 // the first run of this hand-over
	if first {
		s.left(ctx)
	}
	job, err := decodeJob(t.Payload())
	if err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	job.retried += n
	s.shards.place(job)
	if s.cfg.TracerProvider != nil && job.trace != "" {
		// The run's span, under the job's enqueue span: from the enqueue
		// for the job's first run, with its wait in the waiting room.
		var jobSpan trace.Span
		started := time.Now()
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(jobAttrs(job, s.cfg.Queue)...),
			trace.WithAttributes(attribute.Int("sluice.job.moves", job.moves), attribute.Int("sluice.job.retried", job.retried))}
		fromEnqueue := first && job.moves == 0 && job.retried == 0 && !job.enqueuedAt.IsZero() && job.enqueuedAt.Before(started)
		if fromEnqueue {
			opts = append(opts, trace.WithTimestamp(job.enqueuedAt))
		}
		ctx, jobSpan = tracer(s.cfg.TracerProvider).Start(withTraceparent(ctx, job.trace), "sluice.job", opts...)
		if fromEnqueue {
			span(ctx, "sluice.waiting_room", latest(job.enqueuedAt, job.RunAt), started)
		}
		defer func() {
			var re *RescheduleError
			var far *throttle.TooFarError
			var busy *throttle.BusyError
			if err == nil || errors.As(err, &re) || errors.As(err, &far) || errors.As(err, &busy) {
				endSpan(jobSpan, nil)
				return
			}
			endSpan(jobSpan, err)
		}()
	}
	// The first run of a hand-over holds the job's recorded id until the
	// job starts or goes back to the waiting room (release, putBack).
	job.holding = first && job.idRecorded
	key, d, ok := s.throttleFor(job)
	if !ok && job.Downstream != "" && s.cfg.Throttle != nil {
		s.release(ctx, job)
		return fmt.Errorf("%w: job %s names unknown downstream %q", asynq.SkipRetry, job.ID, job.Downstream)
	}
	if ok {
		_, slotSpan := childSpan(ctx, "sluice.slot")
		defer slotSpan.End() // a no-op once ended below
		r, err := s.cfg.Throttle.Wait(ctx, key, horizon(d.Limit), job.units())
		var far *throttle.TooFarError
		if errors.As(err, &far) {
			s.metrics.putBack.WithLabelValues(d.Limit.Name).Inc()
			return s.putBack(ctx, t, job, far.RetryAfter, tooFar(job, far.Paused), mark(job, d), false)
		}
		if err != nil {
			if neverFits(err) {
				s.release(ctx, job)
			}
			return s.throttleError(job, err)
		}
		slotSpan.SetAttributes(attribute.Int64("sluice.slot.delay_us", r.Delay.Microseconds()))
		slotSpan.End()
		ctx = WithReservation(ctx, s.cfg.Throttle, r) // for Reservation, Settle
		if d.Concurrency != nil {
			// The lease is taken once the slot is due, so that a job asleep
			// for its slot or a pause holds none; it is kept (extended)
			// while the handler runs, and given back when it returns.
			s.leaseWaits.watch(s, key) // a release after a refusal is not missed
			asked := time.Now()
			_, leaseSpan := childSpan(ctx, "sluice.lease")
			lease, err := s.cfg.Throttle.Acquire(ctx, key, *d.Concurrency)
			endSpan(leaseSpan, err)
			if err != nil {
				s.cancelSlot(ctx, r)
			}
			var busy *throttle.BusyError
			if errors.As(err, &busy) {
				return s.leaseBusy(ctx, t, job, key, asked)
			}
			if err != nil {
				if neverFits(err) {
					s.release(ctx, job)
				}
				return s.throttleError(job, err)
			}
			ctx = lease.Keep(ctx)
			defer lease.Release(context.WithoutCancel(ctx))
		}
	}
	if err := s.release(ctx, job); err != nil {
		if r, booked := Reservation(ctx); booked {
			s.cancelSlot(ctx, r)
		}
		return fmt.Errorf("%w: ending the hold of job %s's id: %v", errNotFailure, job.ID, err)
	}
	if first {
		s.metrics.starts.Inc()
		// A job for later waits from when it is due.
		s.metrics.waitStart.WithLabelValues(job.Class()).Observe(time.Since(latest(job.enqueuedAt, job.RunAt)).Seconds())
	}
	callCtx, callSpan := childSpan(ctx, "sluice.call", trace.WithSpanKind(trace.SpanKindClient))
	err = leaseLost(ctx, h.ProcessJob(callCtx, job))
	endSpan(callSpan, err)
	var re *RescheduleError
	if errors.As(err, &re) {
		if re.Refused && s.refusedTooOften(job, d) {
			return Permanent(fmt.Errorf("%w: job %s of tenant %.64q: downstream %q refused it %d times (max_refusals); the last: %s",
				ErrRefusedTooOften, job.ID, job.Tenant, job.Downstream, job.refused, re.Reason))
		}
		m := ""
		if re.Refused && job.refused == 1 {
			// The fleet is paused on the key. A job refused again
			// waits alone (downstream.WithOwnPause), so that one call
			// that is always refused costs the others one pause.
			m = mark(job, d)
		}
		return s.putBack(ctx, t, job, re.After, "rescheduled: "+re.Reason, m, false)
	}
	// A handler that paces its own calls says "not now" with the
	// throttle's own errors: back to the waiting room, no retry spent.
	var far *throttle.TooFarError
	if errors.As(err, &far) {
		return s.putBack(ctx, t, job, far.RetryAfter, "handler: "+tooFar(job, far.Paused), "", false)
	}
	var busy *throttle.BusyError
	if errors.As(err, &busy) {
		return s.putBack(ctx, t, job, min(max(busy.RetryAfter, time.Millisecond), time.Second), "handler: every concurrency lease of "+busy.Key+" is held", "", true)
	}
	if m, _ := asynq.GetMaxRetry(ctx); err != nil && n >= m-1 && !errors.Is(err, errNotFailure) {
		return Permanent(err) // the last run the job's MaxRetry allows (see item)
	}
	if err == nil {
		s.forget.add(job)
	}
	return err // nil, asynq.SkipRetry (Permanent) or a failure to retry
}

// release ends the hold of a job's id, which it has from its hand-over
// until it starts or leaves for good (docs/queue.md, Job ids): one
// command for a job whose id is recorded, none for others.
func (s *Server) release(ctx context.Context, job *Job) error {
	if !job.holding {
		return nil
	}
	k := s.shards.of(job.tenantEnc) // process placed the job: decodeJob refused an empty tenant, Encode's only error
	if err := s.client.ZRem(context.WithoutCancel(ctx), k.held, job.ScopedID()).Err(); err != nil {
		return err
	}
	job.holding = false
	return nil
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// refusedTooOften counts a refusal of job by its downstream d, and
// reports (and counts in the metrics) a job refused d's MaxRefusals
// times.
func (s *Server) refusedTooOften(job *Job, d Downstream) bool {
	job.refused++
	if job.refused < cmp.Or(d.MaxRefusals, DefaultMaxRefusals) {
		return false
	}
	s.metrics.refusedOut.WithLabelValues(cmp.Or(d.Limit.Name, "none")).Inc()
	return true
}

// tooFar says why a job whose slot is beyond its downstream's max_wait
// waits: a pause (paused > 0), or the slots booked before it.
func tooFar(job *Job, paused time.Duration) string {
	if paused > 0 {
		return fmt.Sprintf("pause: downstream %s is paused (a 429 or 503)", job.Downstream)
	}
	return fmt.Sprintf("slot: downstream %s's next slot is beyond max_wait", job.Downstream)
}

// leaseBusy puts back a job whose slot came while every concurrency
// lease of its key was held: its tenant sleeps for at most leaseRecheck,
// and is woken as soon as this process hears a lease of key given back
// (docs/throttle.md, Concurrency leases). The job holds no goroutine
// meanwhile, and spends no retry. asked is when it asked for the lease.
func (s *Server) leaseBusy(ctx context.Context, t *asynq.Task, job *Job, key string, asked time.Time) error {
	if err := s.putBack(ctx, t, job, s.leaseRecheck, fmt.Sprintf("lease: every concurrency slot of downstream %s is held", job.Downstream), "", true); err != nil {
		return err
	}
	s.leaseWaits.add(s, key, job.tenantEnc, asked) // process placed the job
	return nil
}

// cancelSlot gives back the slot of a job that will not call now.
func (s *Server) cancelSlot(ctx context.Context, r throttle.Reservation) {
	if _, err := s.cfg.Throttle.Cancel(context.WithoutCancel(ctx), r); err != nil {
		s.log.Warn("sluice: cancelling an unused slot failed", "err", err)
	}
}

// leaseLost maps the error of a handler whose concurrency lease was lost
// while it ran (ctx ended with a *throttle.LostError) to an error that is
// no failure: the call was cut short by sluice, not by the job, so it runs
// again without spending a retry.
func leaseLost(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, throttle.ErrLeaseLost) {
		return fmt.Errorf("%w: %v", errNotFailure, cause)
	}
	return err
}

// throttleError maps an error of the throttle to the job's fate: a job
// that no slot will ever hold is archived at once; anything else (Redis
// unreachable, shutting down) is retried without counting a failure.
func (s *Server) throttleError(job *Job, err error) error {
	if neverFits(err) {
		return fmt.Errorf("%w: job %s of tenant %.64q: downstream %q: %v", asynq.SkipRetry, job.ID, job.Tenant, job.Downstream, err)
	}
	return fmt.Errorf("%w: %v", errNotFailure, err)
}

// neverFits reports whether a throttle error says the job can never be
// given a slot, however long it waits.
func neverFits(err error) bool {
	return errors.Is(err, algorithms.ErrCostExceedsCapacity) || errors.Is(err, algorithms.ErrInvalidCost) ||
		errors.Is(err, algorithms.ErrInvalidPolicy) || errors.Is(err, algorithms.ErrInvalidKey)
}

// left counts a job of this process that has left the pending list of
// its shard's asynq queue (named in ctx), and wakes that shard's
// dispatcher when wakeAfter have since its last claim: the prefetch has
// room for a batch.
func (s *Server) left(ctx context.Context) {
	d := s.disp[0]
	if len(s.disp) > 1 {
		name, _ := asynq.GetQueueName(ctx)
		i := s.shards.index(name)
		if i < 0 {
			return
		}
		d = s.disp[i]
	}
	if d.startedHere.Add(1) >= d.wakeAfter {
		d.poke()
	}
}

// handOverHorizon is the furthest slot a worker books for a job of the
// queue (when its downstream's max_wait allows that long): a job whose
// slot is further away goes back to the waiting room, so that no worker
// sleeps long for a slot while other tenants' jobs wait.
const handOverHorizon = time.Second

// horizon is lim with its wait cut to handOverHorizon.
func horizon(lim throttle.Limit) throttle.Limit {
	if lim.WaitLimit() > handOverHorizon {
		lim.MaxWait = handOverHorizon
	}
	return lim
}

// mark is the name under which a put-back marks job's throttle key full
// in the waiting room (queue_claim.lua): the downstream's name for a
// shared bucket, with "/" and the encoded tenant for a tenant's own.
func mark(job *Job, d Downstream) string {
	if !d.PerTenant {
		return job.Downstream
	}
	enc, _ := keyspace.Encode(job.Tenant) // decodeJob refused an empty tenant
	return job.Downstream + "/" + enc
}

// putBack returns job to the head of its tenant's list, its tenant asleep
// for d, and completes the asynq task with a result that says why. A mark
// (see mark; "" for none) tells the claims to hand over no job of that
// throttle key for d, whatever its tenant. A tenant asleep already keeps
// the later of its two wake times, or with sooner (a put-back for a
// lease, which a release wakes) the sooner: a release that woke it while
// another of its jobs was on its way back must not be undone.
func (s *Server) putBack(ctx context.Context, t *asynq.Task, job *Job, d time.Duration, reason, mark string, sooner bool) error {
	job.moves++
	// Back in the waiting room, a recorded id is counted there and its
	// hold, if the job has one still, ends.
	record, hold := "", ""
	if job.idRecorded {
		record = job.ScopedID()
	}
	if job.holding {
		hold = record
	}
	k, enc, list, _ := s.shards.tenant(job.Tenant) // decodeJob refused an empty tenant, Encode's only error
	item, err := job.item(k.queue)
	if err != nil {
		return err
	}
	if err := scripts.QueueUntake.Run(context.WithoutCancel(ctx), s.client,
		[]string{list, k.ring, k.members, k.sleep, k.meta, k.cdepth, k.ids, k.why, k.full, k.held},
		item, enc, int64(d/time.Microsecond), s.cfg.now(), job.Class(), record, sleepText(job.Tenant, reason), mark, sooner, hold).Err(); err != nil {
		// Could not put it back: let asynq retry it instead (no failure
		// counted); it is not lost.
		return fmt.Errorf("%w: putting job back: %v", errNotFailure, err)
	}
	s.retask(ctx, job)
	s.metrics.putBackSeconds.WithLabelValues(job.Class()).Add(d.Seconds())
	if w := t.ResultWriter(); w != nil {
		fmt.Fprintf(w, "%s: back in sluice's waiting room for %v (no retry spent)", reason, d.Round(time.Millisecond))
	}
	return nil
}

// sampleLoop refreshes the backlog gauge every 10 seconds (one small
// pipeline: a hash with one field per tenant class).
func (s *Server) sampleLoop(ctx context.Context) {
	if s.cfg.Metrics == nil {
		return
	}
	p := &Producer{client: s.client, cfg: s.cfg.Config, shards: s.shards}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		if st, err := p.Stats(ctx); err == nil {
			s.metrics.backlog.Reset()
			for c, n := range st.ByClass {
				s.metrics.backlog.WithLabelValues(c).Set(float64(n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
