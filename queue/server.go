package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/algorithms"
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
	// Circuit is the circuit breaker of each of the downstream's throttle
	// keys (docs/queue.md, A failing downstream's circuit): the zero value
	// opens after throttle.DefaultCircuitFailures consecutive failures
	// (DownstreamFailed) for throttle.DefaultCircuitCooldown; Failures
	// negative for none. Its Name is the Limit's.
	Circuit throttle.Circuit
	// Headroom, from 0 to 0.9, is the share of the quota the API reports
	// that the built-in HTTP job's bucket leaves to the quota's other
	// clients (downstream.Transport.Headroom); 0 leaves none.
	Headroom float64
}

// DefaultMaxRefusals is a Downstream's MaxRefusals unless it sets one:
// with the downstream's pacing right a refusal is rare, and a job refused
// 10 times is one the downstream will not take (a path that always
// answers 429). Each refusal also pauses the downstream fleet-wide for
// its Retry-After: the bound caps what one such job costs everyone.
const DefaultMaxRefusals = 10

// ServerConfig configures a Server. Its zero value runs the waiting room
// that a Producer of the zero Config fills, with the defaults below.
type ServerConfig struct {
	// Queue, Prefix and Shards name the waiting room the server drains:
	// the values of the producers' Config (default "default",
	// DefaultPrefix and 1). A Shards other than the one the queue was
	// created with is refused at Start (ErrShardsChanged).
	Queue  string
	Prefix string
	Shards int
	// Concurrency is the number of jobs this process runs at once;
	// default 10.
	Concurrency int
	// KeyShare is the most of Concurrency's goroutines one throttle key
	// (a downstream, or a downstream/tenant of a per-tenant downstream)
	// holds while other keys are active; beyond it a key takes only
	// goroutines that leave KeyShare free, and its jobs wait in the
	// waiting room, not in a goroutine (docs/queue.md, A key's share).
	// Default DefaultKeyShare(Concurrency); Concurrency or more for no
	// share.
	KeyShare int
	// Prefetch is how many tasks asynq's pending list may hold, fleet-wide,
	// before the dispatcher hands more jobs over; default 3 × Concurrency.
	// Keep it at least the fleet's total concurrency.
	Prefetch int
	// Throttle paces jobs that name a Downstream; nil runs them unpaced.
	Throttle *throttle.Throttle
	// Downstreams returns the throttling of a downstream by name.
	Downstreams func(name string) (Downstream, bool)
	// DeadAfter is how long a worker process's heartbeat may be silent
	// before the others take it for dead and put the jobs it was running
	// back in the waiting room, to run again at once (docs/reliability.md,
	// A worker killed mid-job); default DefaultDeadAfter. A process that
	// stalls longer (a GC pause, a host asleep) may see its jobs run twice.
	DeadAfter time.Duration
	// ShutdownTimeout is how long Shutdown lets running jobs finish;
	// default 30s. Jobs still running then return to asynq's queue.
	ShutdownTimeout time.Duration
	// Retention keeps completed asynq tasks this long (whole seconds),
	// with their results, for asynqmon and the Inspector. Default 0:
	// deleted on completion, as asynq does.
	Retention time.Duration
	// PollInterval is how often a dispatcher that found nothing looks for
	// work again, and the longest an empty dequeue of the process's asynq
	// servers waits for a hand-over, between them; default 50ms. A
	// process that has run nothing for a second waits for a producer's
	// message instead, or 5 s (docs/queue.md, The dispatcher).
	PollInterval time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, traces each run of a job under its
	// enqueue's span (trace.go); nil: no traces.
	TracerProvider trace.TracerProvider
	// Metrics; nil for none.
	Metrics *Metrics

	// clock, when set, replaces the Redis server's clock in the scripts.
	// Only this package's tests set it.
	clock func() time.Time
}

func (c *ServerConfig) now() string { return (&Config{clock: c.clock}).now() }

// room returns the Config of the waiting room the server drains, for
// what a server shares with its producers (the keys, Stats).
func (c *ServerConfig) room() Config {
	return Config{Queue: c.Queue, Prefix: c.Prefix, Shards: c.Shards, Bound: math.MaxInt64, clock: c.clock}
}

// Server runs jobs: asynq's server, the dispatcher that feeds it from the
// waiting room, and the throttle before each handler.
type Server struct {
	client redis.UniversalClient
	cfg    ServerConfig
	shards shards
	// disp are the dispatchers, one a shard.
	disp    []*dispatcher
	asynq   *asynq.Client // writes the tasks of the jobs handed over (handOver)
	metrics *Metrics      // cfg.Metrics, or collectors registered nowhere
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
	forget       *forgetter      // the records of completed jobs (records.go)
	runCtx       context.Context // Start's: ends at Shutdown
	shares       *shares
	alive        *inflight
	wake         *idleWake   // a quiet process's wake-ups (wake.go)
	tightened    tightenings // Tighten's count (relimit.go)
}

// takers is how many asynq servers a Server runs for a concurrency: one
// for every takerShare goroutines, at most maxTakers, each with its
// share.
func takers(concurrency int) int {
	return max(1, min(maxTakers, (concurrency+takerShare-1)/takerShare))
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
	room := cfg.room()
	if err := room.fill(); err != nil {
		return nil, err
	}
	cfg.Queue, cfg.Prefix, cfg.Shards = room.Queue, room.Prefix, room.Shards
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 10)
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("sluice: Concurrency must be positive, got %d", cfg.Concurrency)
	}
	cfg.Prefetch = cmp.Or(cfg.Prefetch, 3*cfg.Concurrency)
	cfg.KeyShare = cmp.Or(cfg.KeyShare, DefaultKeyShare(cfg.Concurrency))
	if cfg.KeyShare < 0 {
		return nil, fmt.Errorf("sluice: KeyShare must be positive, got %d", cfg.KeyShare)
	}
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, 30*time.Second)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 50*time.Millisecond)
	cfg.DeadAfter = cmp.Or(cfg.DeadAfter, DefaultDeadAfter)
	if cfg.DeadAfter < 0 {
		return nil, fmt.Errorf("sluice: DeadAfter must not be negative, got %v", cfg.DeadAfter)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("sluice: Retention must not be negative, got %v", cfg.Retention)
	}
	s := &Server{client: client, cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()),
		fullRecheck: fullRecheckPolls * cfg.PollInterval, leaseRecheck: leaseRecheck,
		shares: newShares(cfg.KeyShare, cfg.Concurrency, time.Second), alive: newInflight(cfg.Prefix, cfg.Queue, cfg.DeadAfter),
		shards: newShards(cfg.Prefix, cfg.Queue, cfg.Shards), metrics: cfg.Metrics,
		wake: newIdleWake(cfg.Prefix, cfg.Queue)}
	pending := map[string]bool{} // for parkingClient
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
		pending[k.asynqPending] = true
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
		parking := &parkingClient{UniversalClient: client, wake: s.wake, pending: pending, active: time.Duration(n) * cfg.PollInterval}
		s.srv = append(s.srv, asynq.NewServerFromRedisClient(parking, asynq.Config{
			Concurrency:     share,
			Queues:          queues,
			ShutdownTimeout: cfg.ShutdownTimeout,
			LogLevel:        asynq.WarnLevel,
			// An empty dequeue waits in parkingClient (wake.go), woken by
			// a hand-over; asynq's own sleep after it is kept short, so
			// that a job handed over then does not wait for it.
			TaskCheckInterval: asynqCheckInterval,
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
			if strings.HasPrefix(string(t.Payload()), oldEntryMarker) {
				return fmt.Errorf("%w: %v", asynq.SkipRetry, errOldEntry)
			}
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
	s.startAlive()
	s.wg.Add(2 + len(s.disp))
	go func() { defer s.wg.Done(); s.listenWake(ctx) }()
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
	s.wake.close()
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
	s.stopAlive() // after asynq's servers: a job still running is no dead worker's
	s.leaseWaits.wg.Wait()
	s.forget.flush(context.Background())
}

// run is one asynq task of a job, as process takes it through its steps.
type run struct {
	t     *asynq.Task
	job   *Job
	tries int  // asynq's retry count: the failed runs of this hand-over
	first bool // the first run of this hand-over
	// key and d are the job's throttle key (ThrottleKey) and downstream;
	// paced: the server paces it (a Throttle, and d known).
	key   string
	d     Downstream
	paced bool
	lease *throttle.Lease // held while the handler runs, if d has Concurrency
}

// process runs one asynq task: open it, pace it (slot, lease), start
// it, run the handler, and map what the handler returned to the job's
// fate.
func (s *Server) process(ctx context.Context, t *asynq.Task, h Handler) (err error) {
	s.wake.touch()
	defer s.wake.touch()
	task, _ := asynq.GetTaskID(ctx)
	if n, _ := asynq.GetRetryCount(ctx); s.recoveredElsewhere(ctx, t, task, n) {
		return nil
	}
	r, err := s.open(ctx, t)
	if err != nil {
		return err
	}
	defer s.alive.started(task, r.tries, t.Payload())()
	if open, err := s.circuitOpen(ctx, t, r.job, r.key, r.d, r.paced); open {
		return err
	}
	shareDone, over, err := s.overShare(ctx, t, r.job, r.key, r.d.Limit.Name)
	if over {
		return err
	}
	defer shareDone()
	if s.cfg.TracerProvider != nil && r.job.trace != "" {
		var end func(error)
		ctx, end = s.traceRun(ctx, r)
		defer func() { end(err) }()
	}
	ctx, ready, err := s.pace(ctx, r)
	if r.lease != nil {
		defer r.lease.Release(context.WithoutCancel(ctx))
	}
	if !ready {
		return err // put back (nil), or a failure
	}
	if err := s.start(ctx, r); err != nil {
		return err
	}
	callCtx, call := childSpan(ctx, "sluice.call", trace.WithSpanKind(trace.SpanKindClient))
	herr := leaseLost(ctx, h.ProcessJob(callCtx, r.job))
	endSpan(call, herr)
	s.circuitReport(ctx, r.key, r.d, r.paced, herr)
	if herr == nil {
		s.forget.add(r.job)
	}
	return s.outcome(ctx, r, herr)
}

// open decodes a task's job and finds its downstream. The first run of a
// hand-over holds the job's recorded id until the job starts or goes
// back to the waiting room (release, putBack).
func (s *Server) open(ctx context.Context, t *asynq.Task) (*run, error) {
	r := &run{t: t}
	r.tries, _ = asynq.GetRetryCount(ctx)
	r.first = r.tries == 0
	if r.first {
		s.left(ctx)
	}
	job, err := decodeJob(t.Payload())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	job.retried += r.tries
	s.shards.place(job)
	job.holding = r.first && job.idRecorded
	r.job = job
	if job.Downstream != "" && s.cfg.Throttle != nil {
		if s.cfg.Downstreams != nil {
			r.d, r.paced = s.cfg.Downstreams(job.Downstream)
		}
		if !r.paced {
			s.release(ctx, job)
			return nil, fmt.Errorf("%w: job %s names unknown downstream %q", asynq.SkipRetry, job.ID, job.Downstream)
		}
	}
	r.d.Limit.Name = cmp.Or(r.d.Limit.Name, job.Downstream)
	r.key = ThrottleKey(job, r.d.PerTenant)
	return r, nil
}

// pace takes the job's throttle slot (within handOverHorizon) and, for a
// downstream with Concurrency, a lease, kept (extended) while the
// handler runs. The lease is taken once the slot is due, so that a job
// asleep for its slot or a pause holds none. ready is false when the
// job must not call now: err is then nil for a job put back in the
// waiting room, else its failure.
func (s *Server) pace(ctx context.Context, r *run) (_ context.Context, ready bool, _ error) {
	if !r.paced {
		return ctx, true, nil
	}
	job := r.job
	tightened := s.tightened.Load() // relimit.go
	_, slotSpan := childSpan(ctx, "sluice.slot")
	slot, err := s.cfg.Throttle.Wait(ctx, r.key, horizon(r.d.Limit), job.units())
	slotSpan.SetAttributes(attribute.Int64("sluice.slot.delay_us", slot.Delay.Microseconds()))
	endSpan(slotSpan, err)
	var far *throttle.TooFarError
	if errors.As(err, &far) {
		s.metrics.putBack.WithLabelValues(r.d.Limit.Name).Inc()
		return ctx, false, s.putBack(ctx, r.t, job, far.RetryAfter, tooFar(job, far.Paused), r.key, false)
	}
	if err != nil {
		return ctx, false, s.throttleError(ctx, job, err)
	}
	if s.tightened.Load() != tightened {
		// The fleet's limits tightened while this job slept for a slot
		// booked at the old ones: book again at the new.
		s.cancelSlot(ctx, slot)
		return ctx, false, s.putBack(ctx, r.t, job, 0, limitsTightened, "", false)
	}
	ctx = WithReservation(ctx, s.cfg.Throttle, slot) // for Reservation, Settle
	if r.d.Concurrency == nil {
		return ctx, true, nil
	}
	s.leaseWaits.watch(s, r.key) // a release after a refusal is not missed
	asked := time.Now()
	_, leaseSpan := childSpan(ctx, "sluice.lease")
	lease, err := s.cfg.Throttle.Acquire(ctx, r.key, *r.d.Concurrency)
	endSpan(leaseSpan, err)
	var busy *throttle.BusyError
	switch {
	case errors.As(err, &busy):
		s.cancelSlot(ctx, slot)
		return ctx, false, s.leaseBusy(ctx, r.t, job, r.key, asked)
	case err != nil:
		s.cancelSlot(ctx, slot)
		return ctx, false, s.throttleError(ctx, job, err)
	}
	r.lease = lease
	return lease.Keep(ctx), true, nil
}

// start ends the hold of the job's id and counts its start.
func (s *Server) start(ctx context.Context, r *run) error {
	job := r.job
	if err := s.release(ctx, job); err != nil {
		if slot, booked := Reservation(ctx); booked {
			s.cancelSlot(ctx, slot)
		}
		return fmt.Errorf("%w: ending the hold of job %s's id: %v", errNotFailure, job.ID, err)
	}
	if r.first {
		s.metrics.starts.Inc()
		// A job for later waits from when it is due.
		s.metrics.waitStart.WithLabelValues(job.Class()).Observe(time.Since(latest(job.enqueuedAt, job.RunAt)).Seconds())
	}
	return nil
}

// outcome maps the handler's err to the job's fate: back to the waiting
// room without spending a retry (Reschedule, Refused, the throttle's own
// "not now"), archived (Permanent, the last retry, refused too often), or
// asynq's retry.
func (s *Server) outcome(ctx context.Context, r *run, err error) error {
	job := r.job
	var re *RescheduleError
	if errors.As(err, &re) {
		if re.Refused && s.refusedTooOften(job, r.d) {
			return Permanent(fmt.Errorf("%w: job %s of tenant %.64q: downstream %q refused it %d times (max_refusals); the last: %s",
				ErrRefusedTooOften, job.ID, job.Tenant, job.Downstream, job.refused, re.Reason))
		}
		m := ""
		if re.Refused && job.refused == 1 {
			// The fleet is paused on the key. A job refused again
			// waits alone (downstream.WithOwnPause), so that one call
			// that is always refused costs the others one pause.
			m = r.key
		}
		return s.putBack(ctx, r.t, job, re.After, "rescheduled: "+re.Reason, m, false)
	}
	var far *throttle.TooFarError
	if errors.As(err, &far) {
		return s.putBack(ctx, r.t, job, far.RetryAfter, "handler: "+tooFar(job, far.Paused), "", false)
	}
	var busy *throttle.BusyError
	if errors.As(err, &busy) {
		return s.putBack(ctx, r.t, job, min(max(busy.RetryAfter, time.Millisecond), leaseRecheck), "handler: every concurrency lease of "+busy.Key+" is held", "", true)
	}
	if m, _ := asynq.GetMaxRetry(ctx); err != nil && r.tries >= m-1 && !errors.Is(err, errNotFailure) {
		return Permanent(err) // the last run the job's MaxRetry allows (see item)
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
// that no slot will ever hold is archived at once (its id's hold ended);
// anything else (Redis unreachable, shutting down) is retried without
// counting a failure.
func (s *Server) throttleError(ctx context.Context, job *Job, err error) error {
	if neverFits(err) {
		s.release(ctx, job)
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

// horizon is lim with its wait cut to handOverHorizon.
func horizon(lim throttle.Limit) throttle.Limit {
	if lim.WaitLimit() > handOverHorizon {
		lim.MaxWait = handOverHorizon
	}
	return lim
}

// putBack returns job to the head of its tenant's list, its tenant asleep
// for d, and completes the asynq task with a result that says why. A mark
// (ThrottleKey; "" for none) tells the claims to hand over no job of that
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
	item, err := job.item()
	if err != nil {
		return err
	}
	if err := scripts.QueueUntake.Run(context.WithoutCancel(ctx), s.client,
		[]string{list, k.ring, k.members, k.sleep, k.meta, k.cdepth, k.ids, k.why, k.full, k.held, k.jobs},
		item, enc, int64(d/time.Microsecond), s.cfg.now(), job.Class(), record, sleepText(job.Tenant, reason), mark, sooner, hold,
		job.ScopedID(), job.handOver()).Err(); err != nil {
		// Could not put it back: let asynq retry it instead (no failure
		// counted); it is not lost.
		return fmt.Errorf("%w: putting job back: %v", errNotFailure, err)
	}
	s.metrics.putBackSeconds.WithLabelValues(job.Class()).Add(d.Seconds())
	if w := t.ResultWriter(); w != nil {
		fmt.Fprintf(w, "%s: back in sluice's waiting room for %v (no retry spent)", reason, d.Round(time.Millisecond))
	}
	return nil
}

// sampleLoop refreshes the backlog gauge every backlogSampleEvery (one small
// pipeline: a hash with one field per tenant class).
func (s *Server) sampleLoop(ctx context.Context) {
	if s.cfg.Metrics == nil {
		return
	}
	p := &Producer{client: s.client, cfg: s.cfg.room(), shards: s.shards}
	tick := time.NewTicker(backlogSampleEvery)
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
