package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/throttle"
)

// Registry is where a worker registers its metrics and what /metrics
// serves: a *prometheus.Registry is one.
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// Config configures a Worker. The zero value of each field is its
// default; a nil *Config is all defaults, which New refuses for want of
// a policy and a Redis.
type Config struct {
	// Policy is the queue, its downstreams and tenants (policy.Parse,
	// policy.Load). Exactly one of Policy and PolicyFile is required.
	Policy *policy.Config
	// PolicyFile is the path of a policy file, which New loads
	// (policy.Load; its errors name the line and field).
	PolicyFile string

	// Redis is the Redis the worker runs on, a *redis.Client or
	// *redis.ClusterClient; the worker does not close it. Without it,
	// Run builds a client from RedisURL, RedisCluster and RedisCAFile
	// and closes it when it returns. One of Redis, RedisURL and
	// RedisCluster is required: a worker never falls back to an
	// embedded Redis that was not asked for (ErrNoRedis).
	Redis redis.UniversalClient
	// RedisURL is redis://[user:password@]host:port/db, or rediss://
	// for TLS; with RedisCluster it gives only the credentials and TLS.
	// redis+sentinel://[user:password@]host:port,.../master?db=N&
	// sentinel_password=... (rediss+sentinel:// for TLS) follows the
	// primary that Redis Sentinel names, through a failover.
	// EmbeddedRedis ("embedded") starts an in-memory Redis for trials.
	RedisURL string
	// RedisCluster is a comma-separated list of Redis Cluster addresses.
	RedisCluster string
	// RedisCAFile is a PEM file of the CAs to trust for rediss://
	// instead of the system's.
	RedisCAFile string
	// AllowEvictingRedis lets the worker run on a Redis whose
	// maxmemory-policy may evict keys (and lose jobs when it is full):
	// it warns, and sets sluice_redis_evicting. Without it Run refuses
	// such a Redis with a *queue.RedisEvictsError.
	AllowEvictingRedis bool
	// RedisCheckEvery is how often the worker checks that Redis kept its
	// data (a marker key per master) and reads its memory use; default
	// 5s.
	RedisCheckEvery time.Duration

	// Listen is the address of the HTTP endpoints: the sluice page at
	// /, POST /enqueue, /metrics, /healthz and asynqmon at /monitoring/;
	// default "127.0.0.1:9090". Loopback unless something in front
	// authenticates, or with EnqueueKeys and OperatorToken: without
	// them POST /enqueue takes jobs from anyone who reaches it.
	Listen string
	// Listener, when set, is where the endpoints are served instead of
	// Listen (a program that wants port 0, or its own socket); Run
	// closes it.
	Listener net.Listener
	// AllowedHosts are the Host names the endpoints answer to besides
	// the listen address (and localhost, 127.0.0.1 and [::1] on a
	// loopback or all-addresses listener): "name" for any port,
	// "name:port" for one. Every other Host gets 421, and a foreign
	// Origin 403, so that a web page cannot reach the worker.
	AllowedHosts []string
	// MonitorWritable lets asynqmon's UI delete and retry tasks; by
	// default it is read-only.
	MonitorWritable bool
	// EnqueueKeys makes POST /enqueue take only callers with an API key
	// of the queue, the job's tenant the key's (queue.HTTPKeyHandler;
	// keys are managed with "enqueue keys" or queue.Producer.Keys). By
	// default it takes any tenant's jobs from whoever reaches it.
	EnqueueKeys bool
	// OperatorToken, when set, is required on the page (/), /metrics and
	// /monitoring/, as "Authorization: Bearer <token>" or as the password
	// of HTTP basic authentication (any user name); at least 16 bytes.
	// /healthz stays open.
	OperatorToken string

	// Concurrency is how many jobs this process runs at once; default
	// 10.
	Concurrency int
	// KeyShare is the most of Concurrency one throttle key holds while
	// other keys are active (queue.ServerConfig.KeyShare); default
	// queue.DefaultKeyShare(Concurrency), a quarter.
	KeyShare int
	// Fallback, between 0 and 1, is the share of each downstream's rate
	// this process may use on its own while Redis is unreachable
	// (throttle.Options.Fallback); default 0: fail closed.
	Fallback float64
	// ShutdownTimeout is how long running jobs get to finish once Run's
	// context ends; the rest return to the queue. Default 30s.
	ShutdownTimeout time.Duration

	// Logger receives the worker's log; default slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, traces every job with OpenTelemetry
	// (queue.Config.TracerProvider: a span per run of a job under its
	// enqueue's, with its waits as child spans, and the built-in HTTP
	// job's request carrying traceparent); nil: no traces.
	TracerProvider trace.TracerProvider

	// Registry receives the worker's metrics (sluice_*) and is what
	// /metrics serves; the program may register its own there too.
	// Default: a new registry with the Go and process collectors.
	Registry Registry
}

// ErrConfig is wrapped by New's errors for a Config it refuses.
var ErrConfig = errors.New("sluice: worker: bad config")

// ErrNoRedis is wrapped by New's error for a Config that names no Redis.
var ErrNoRedis = errors.New("no Redis configured")

// defaults of Config.
const (
	defaultListen          = "127.0.0.1:9090"
	defaultConcurrency     = 10
	defaultShutdownTimeout = 30 * time.Second
	defaultRedisCheckEvery = 5 * time.Second
)

// Worker is one worker process's worth of sluice: the queue's workers and
// dispatcher with the built-in HTTP job and the program's handlers, the
// shared throttle, and the HTTP endpoints. Create it with New, add
// handlers with Handle, and Run it once.
type Worker struct {
	cfg    Config         // filled: every default set
	policy *policy.Config // the policy as given
	log    *slog.Logger
	reg    Registry
	mux    *queue.ServeMux
	// limits and page are the HTTP server's and the page's limits;
	// tests change them before Run.
	limits serverLimits
	page   pageLimits

	mu      sync.Mutex
	types   []string                      // registered by the program, in order
	known   atomic.Pointer[policy.Config] // the policy with types: the producer's check
	builtin atomic.Pointer[httpjob.Handler]
	ran     atomic.Bool

	// Made by start.
	client   redis.UniversalClient
	th       *throttle.Throttle
	producer *queue.Producer
	server   *queue.Server
	sched    *scheduler
	http     *http.Server
	ln       net.Listener
	watch    *redisconn.Watch
	calls    callCounts // for the page
	fleet    fleetFlush // what this worker added to the fleet's counts
	closers  []func()   // what start opened, undone in reverse

	// The policy as the fleet binds it (policyfleet.go): replaced by
	// a reload and by the fleet's beat, read by every job.
	state   atomic.Pointer[policyState]
	pfleet  *policyFleet
	reloads sync.Mutex  // one Reload at a time
	started atomic.Bool // start has made what Reload uses
}

// New checks cfg and returns a Worker that Run starts. It reads the
// policy file, if any, and touches nothing else: no Redis, no socket.
// Its errors are a policy file's (a policy.ErrorList naming line and
// field) or wrap ErrConfig.
func New(cfg *Config) (*Worker, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	bad := func(format string, args ...any) (*Worker, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case c.Policy == nil && c.PolicyFile == "":
		return bad("a Policy or a PolicyFile is required")
	case c.Policy != nil && c.PolicyFile != "":
		return bad("a Policy and a PolicyFile: give one")
	}
	pol := c.Policy
	if pol == nil {
		var err error
		if pol, err = policy.Load(c.PolicyFile); err != nil {
			return nil, err
		}
	}
	switch {
	case c.Redis == nil && c.RedisURL == "" && c.RedisCluster == "" && c.RedisCAFile == "":
		return bad("%w: set Redis, RedisURL or RedisCluster", ErrNoRedis)
	case c.Redis != nil && (c.RedisURL != "" || c.RedisCluster != "" || c.RedisCAFile != ""):
		return bad("a Redis client and RedisURL, RedisCluster or RedisCAFile: give one")
	case c.RedisURL == EmbeddedRedis && c.RedisCluster != "":
		return bad("RedisURL %q and RedisCluster: choose one", EmbeddedRedis)
	case c.Concurrency < 0:
		return bad("Concurrency must be at least 1, got %d", c.Concurrency)
	case c.KeyShare < 0:
		return bad("KeyShare must not be negative, got %d", c.KeyShare)
	case c.Fallback < 0 || c.Fallback > 1:
		return bad("Fallback must be between 0 and 1, got %v", c.Fallback)
	case c.ShutdownTimeout < 0:
		return bad("ShutdownTimeout must not be negative, got %v", c.ShutdownTimeout)
	case c.RedisCheckEvery < 0:
		return bad("RedisCheckEvery must not be negative, got %v", c.RedisCheckEvery)
	}
	hosts, err := allowedHosts(c.AllowedHosts)
	if err != nil {
		return bad("%v", err)
	}
	if c.OperatorToken != "" && len(c.OperatorToken) < minOperatorToken {
		return bad("OperatorToken (-operator-token) is %d bytes; use at least %d random ones (openssl rand -hex 32)", len(c.OperatorToken), minOperatorToken)
	}
	c.AllowedHosts = hosts
	c.Listen = cmp.Or(c.Listen, defaultListen)
	c.Concurrency = cmp.Or(c.Concurrency, defaultConcurrency)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, defaultShutdownTimeout)
	c.RedisCheckEvery = cmp.Or(c.RedisCheckEvery, defaultRedisCheckEvery)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	reg := c.Registry
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = r
	}
	w := &Worker{cfg: c, policy: pol, log: c.Logger, reg: reg, mux: queue.NewServeMux(), limits: defaultLimits, page: defaultPageLimits}
	w.known.Store(pol)
	w.state.Store(newPolicyState(pol, time.Now()))
	// The built-in HTTP job; its handler is made by Run, with the
	// throttle.
	w.mux.Handle(httpjob.Type, queue.HandlerFunc(func(ctx context.Context, job *queue.Job) error {
		return w.builtin.Load().ProcessJob(ctx, job)
	}))
	return w, nil
}

// Handle registers h for jobs of type typ, beside the built-in
// httpjob.Type. When the policy lists queue.types, typ is added to the
// types this worker's POST /enqueue accepts (policy.Config.WithTypes);
// other producers of the same file accept it only if the file lists it,
// and Run logs the types it does not. It panics, as net/http's ServeMux
// does for a programming error, if typ is registered twice or is not a
// valid job type (1 to queue.MaxTypeLen bytes of letters, digits and
// _.:-/). Safe to call while the worker runs.
func (w *Worker) Handle(typ string, h queue.Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	known, err := w.known.Load().WithTypes(typ)
	if err != nil {
		panic("sluice: worker: Handle: " + err.Error())
	}
	w.mux.Handle(typ, h)
	w.types = append(w.types, typ)
	w.known.Store(known)
}

// HandleFunc registers f for jobs of type typ, as Handle does.
func (w *Worker) HandleFunc(typ string, f func(ctx context.Context, job *queue.Job) error) {
	w.Handle(typ, queue.HandlerFunc(f))
}

// Use appends middleware that wraps every handler, the built-in one
// among them, in the order given (queue.ServeMux.Use).
func (w *Worker) Use(mw ...queue.Middleware) { w.mux.Use(mw...) }

// Run connects to Redis and checks it (a Redis that may evict keys is
// refused unless AllowEvictingRedis), starts the queue's workers and the
// dispatcher, enqueues the policy's periodic jobs at their ticks (each
// tick once across the fleet: docs/policy.md, Periodic jobs), serves the HTTP endpoints, and logs "sluice worker
// started". When ctx ends it stops gracefully: the endpoints stop taking
// jobs, the dispatcher stops, running jobs get ShutdownTimeout to finish
// and the rest return to the queue; it logs "sluice worker stopped" with
// the counts, closes what it opened, and returns nil. An error is
// returned when the worker cannot start or its HTTP server fails. A
// Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if w.ran.Swap(true) {
		return errors.New("sluice: worker: Run called twice")
	}
	if err := w.start(ctx); err != nil {
		return err
	}
	defer w.close()
	return w.serve(ctx)
}

// start connects to Redis and makes the throttle, the producer, the
// server and the HTTP server. What it opened, close undoes; on an error
// it undoes it itself.
func (w *Worker) start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.cfg.Listener != nil {
		w.closers = append(w.closers, func() { w.cfg.Listener.Close() })
	}
	client, closeRedis, embedded, err := w.connect(ctx)
	if err != nil {
		return err
	}
	w.client = client
	w.closers = append(w.closers, closeRedis)
	if err := checkRedis(ctx, client, w.cfg.AllowEvictingRedis, embedded, w.log); err != nil {
		return err
	}
	cfg, o := w.policy, w.cfg
	thMetrics, err := throttle.NewMetrics(w.reg)
	if err != nil {
		return err
	}
	dsMetrics, err := downstream.NewMetrics(w.reg)
	if err != nil {
		return err
	}
	qMetrics, err := queue.NewMetrics(w.reg, cfg.Queue.Name)
	if err != nil {
		return err
	}
	if w.watch, err = redisconn.NewWatch(client, o.RedisCheckEvery, queue.DefaultMemoryHeadroom, w.log, w.reg); err != nil {
		return err
	}
	w.th, err = throttle.New(client, &throttle.Options{Fallback: o.Fallback, Metrics: thMetrics, Logger: w.log})
	if err != nil {
		return err
	}
	w.closers = append(w.closers, func() { w.th.Close() })
	// Before the first job: this worker's policy is published, and bound
	// by the fleet's (policyfleet.go).
	if w.pfleet, err = newPolicyFleet(client, cfg.Queue.Name, w.reg); err != nil {
		return err
	}
	if err := w.beatPolicy(ctx, true); err != nil {
		w.log.Warn("sluice: the fleet's policies could not be read; pacing by this worker's file until the next beat", "err", err)
	}
	w.pfleet.announce(ctx)
	qc := cfg.QueueConfig()
	qc.AllowEviction = o.AllowEvictingRedis
	qc.TracerProvider = o.TracerProvider
	qc.Check = func(job *queue.Job) error { return w.known.Load().CheckJob(job) }
	qc.Tenants = func(id string) queue.TenantPolicy { return w.state.Load().tenants(id) }
	if w.producer, err = queue.NewProducer(client, &qc); err != nil {
		return err
	}
	ticks, err := newTickCounter(w.reg)
	if err != nil {
		return err
	}
	w.sched = newScheduler(w.producer, cfg.Schedules, time.Now, w.log, ticks)
	w.server, err = queue.NewServer(client, &queue.ServerConfig{
		Queue:       qc.Queue,
		Prefix:      qc.Prefix,
		Shards:      qc.Shards,
		Concurrency: o.Concurrency,
		KeyShare:    o.KeyShare,
		Prefetch:    cfg.Queue.Prefetch,
		Throttle:    w.th,
		Downstreams: func(name string) (queue.Downstream, bool) {
			d, ok := w.state.Load().bound[name]
			return d, ok
		},
		ShutdownTimeout: o.ShutdownTimeout,
		Retention:       cfg.Queue.Retention,
		Logger:          w.log,
		Metrics:         qMetrics,
		TracerProvider:  o.TracerProvider,
	})
	if err != nil {
		return err
	}
	// The built-in HTTP job. Go's default transport keeps 2 idle
	// connections a host: with more calls in flight to one downstream,
	// every call beyond them would open (and close) a connection of its
	// own, whose set-up delays the call past its slot. NewBase limits a
	// response's header to 64 KiB.
	base := downstream.NewBase()
	base.MaxIdleConnsPerHost = max(o.Concurrency, 2)
	w.builtin.Store(&httpjob.Handler{Throttle: w.th, Metrics: dsMetrics, Base: base, Resolve: w.resolveHTTP})

	mux := http.NewServeMux()
	op := operatorGuard(o.OperatorToken)
	mux.Handle("/metrics", op(promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := client.Ping(ctx).Err(); err != nil {
			http.Error(rw, "redis: unreachable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	enqueue := queue.HTTPHandler(w.producer)
	if o.EnqueueKeys {
		if enqueue, err = queue.HTTPKeyHandler(w.producer, nil); err != nil {
			return err
		}
	}
	mux.Handle("/enqueue", enqueue)
	in, err := queue.NewInspector(client, &queue.InspectorConfig{Queue: qc.Queue, Prefix: qc.Prefix, Shards: qc.Shards, Throttle: w.th, Downstreams: func(name string) (queue.Downstream, bool) {
		d, ok := w.state.Load().bound[name]
		return d, ok
	}})
	if err != nil {
		return err
	}
	handleJobs(mux, in, op)
	mux.Handle("GET /{$}", op(http.HandlerFunc(w.servePage)))
	// asynqmon is not closed: its Close would close client, which is
	// closed by its owner.
	mux.Handle("/monitoring/", op(asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: sharedConn{client},
		ReadOnly: !o.MonitorWritable, PayloadFormatter: asynqmon.PayloadFormatterFunc(redactedPayload)})))
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", o.Listen); err != nil {
			return fmt.Errorf("listen %s: %w", o.Listen, err)
		}
		w.closers = append(w.closers, func() { ln.Close() })
	}
	cl := newConnLimiter(ln, w.limits.MaxConns)
	w.ln = cl
	listen := o.Listen
	if o.Listener != nil {
		listen = ln.Addr().String()
	}
	w.http = &http.Server{
		Handler:           newHostGuard(listen, w.ln.Addr(), o.AllowedHosts, mux),
		ReadHeaderTimeout: w.limits.ReadHeader,
		ReadTimeout:       w.limits.Read,
		WriteTimeout:      w.limits.Write,
		IdleTimeout:       w.limits.Idle,
		ConnState:         cl.connState,
	}
	if tcp, ok := w.ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		if tcp.IP.IsUnspecified() && len(o.AllowedHosts) == 0 {
			w.log.Warn("sluice: listening on every address, the HTTP endpoints answer only to localhost, 127.0.0.1 and [::1]: give the names clients use with AllowedHosts (-allowed-hosts)", "addr", w.ln.Addr().String())
		}
	}
	return nil
}

// close undoes what start opened, last first.
func (w *Worker) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}

// serve runs the started worker until ctx is done, then shuts it down
// gracefully (Run).
func (w *Worker) serve(ctx context.Context) error {
	var tally jobTally
	w.started.Store(true)
	if err := w.server.Start(tally.wrap(w.calls.wrap(w.mux))); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		if err := w.http.Serve(w.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	wctx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { w.watch.Loop(wctx) })
	loops.Go(func() { w.sched.run(wctx) })
	loops.Go(func() { w.policyLoop(wctx) })
	base := "http://" + w.ln.Addr().String()
	w.log.Info("sluice worker started", "queue", w.policy.Queue.Name, "listen", w.ln.Addr().String(), "concurrency", w.cfg.Concurrency,
		"page", base+"/", "metrics", base+"/metrics", "healthz", base+"/healthz", "enqueue", "POST "+base+"/enqueue", "monitoring", base+"/monitoring/")
	w.logUnlistedTypes()
	w.logAccess()
	loops.Go(func() {
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				// The last second's calls count in the fleet's too.
				fctx, cancel := context.WithTimeout(context.Background(), time.Second)
				all, refused := w.responsesByDownstream()
				w.flushFleet(fctx, time.Now(), all, refused)
				cancel()
				return
			case now := <-tick.C:
				all, refused := w.responsesByDownstream()
				w.calls.sample(now, all, refused)
				if err := w.flushFleet(wctx, now, all, refused); err != nil && wctx.Err() == nil {
					w.log.Debug("sluice: the page's fleet counts", "err", err)
				}
			}
		}
	})
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopLoops()
	loops.Wait()
	running := tally.stop()
	w.log.Info("sluice worker stopping", "running", running, "shutdown_timeout", w.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.http.Shutdown(sctx)
	w.server.Shutdown()
	finished, returned := tally.afterStop()
	w.log.Info("sluice worker stopped", "jobs_run", tally.total.Load(), "running_at_stop", running,
		"finished_after_stop", finished, "returned_to_queue", returned)
	return err
}

// logAccess says, in one line, who may use the HTTP endpoints: a warning
// when they listen beyond loopback with POST /enqueue or the operator
// endpoints open.
func (w *Worker) logAccess() {
	addr := w.ln.Addr().String()
	tcp, ok := w.ln.Addr().(*net.TCPAddr)
	loopback := ok && tcp.IP.IsLoopback()
	keys, token := w.cfg.EnqueueKeys, w.cfg.OperatorToken != ""
	switch {
	case keys && token:
		w.log.Info("sluice: POST /enqueue takes callers with an API key of the queue (-enqueue-keys); the page, /metrics and /monitoring/ need the operator token", "addr", addr)
	case loopback && !keys:
		w.log.Info("sluice: POST /enqueue takes any tenant's jobs from whoever reaches it (no -enqueue-keys); it listens on loopback only", "addr", addr, "operator_token", token)
	case loopback:
		w.log.Info("sluice: POST /enqueue takes callers with an API key of the queue (-enqueue-keys); the page, /metrics and /monitoring/ are open on loopback (no -operator-token)", "addr", addr)
	case !keys:
		w.log.Warn("sluice: the HTTP endpoints listen beyond loopback and POST /enqueue takes any tenant's jobs from whoever reaches it: set -enqueue-keys and -operator-token, or put something that authenticates in front", "addr", addr, "operator_token", token)
	default:
		w.log.Warn("sluice: the HTTP endpoints listen beyond loopback and the page, /metrics and /monitoring/ (which can delete tasks when writable) are open: set -operator-token", "addr", addr)
	}
}

// logUnlistedTypes says which of the program's job types the policy's
// queue.types does not list: this worker accepts them, producers that
// read the file alone refuse them.
func (w *Worker) logUnlistedTypes() {
	if w.policy.Queue.Types == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.types {
		if !slices.Contains(w.policy.Queue.Types, t) {
			w.log.Info("sluice: a job type this worker handles is not in the policy's queue.types: its POST /enqueue accepts it, producers that read the file refuse it; list it there", "type", t)
		}
	}
}

// redactedPayload formats a task's payload for asynqmon as its default
// formatter does, with the secret header values of a built-in HTTP job
// (Authorization, Cookie, ...) replaced (httpjob.Redact).
func redactedPayload(taskType string, payload []byte) string {
	if taskType == httpjob.Type {
		// The envelope's fields as they are (the queue's too), its
		// payload redacted.
		var env map[string]json.RawMessage
		var req []byte
		if json.Unmarshal(payload, &env) == nil && json.Unmarshal(env["payload"], &req) == nil {
			env["payload"], _ = json.Marshal(httpjob.Redact(req))
			if b, err := json.Marshal(env); err == nil {
				payload = b
			}
		}
	}
	return asynqmon.DefaultPayloadFormatter.FormatPayload(taskType, payload)
}

// sharedConn is the asynq.RedisConnOpt that hands asynqmon the worker's
// own client: the same Redis, credentials and TLS, and no pool of its own.
type sharedConn struct{ client redis.UniversalClient }

// MakeRedisClient returns the worker's client.
func (c sharedConn) MakeRedisClient() any { return c.client }

// jobTally counts the jobs this process ran, and what became of those
// running when it was told to stop: finished within the shutdown timeout,
// or cut short and returned to the queue (asynq runs them again).
type jobTally struct {
	total, running   atomic.Int64
	stopping         atomic.Bool
	finished, cutOff atomic.Int64
}

func (t *jobTally) wrap(h queue.Handler) queue.Handler {
	return queue.HandlerFunc(func(ctx context.Context, job *queue.Job) error {
		t.running.Add(1)
		err := h.ProcessJob(ctx, job)
		t.running.Add(-1)
		t.total.Add(1)
		if t.stopping.Load() {
			if ctx.Err() != nil {
				t.cutOff.Add(1)
			} else {
				t.finished.Add(1)
			}
		}
		return err
	})
}

// stop marks the start of the shutdown and returns the jobs running then.
func (t *jobTally) stop() int64 {
	t.stopping.Store(true)
	return t.running.Load()
}

// afterStop returns how many of the jobs running at the stop finished,
// and how many went back to the queue.
func (t *jobTally) afterStop() (finished, returned int64) {
	return t.finished.Load(), t.cutOff.Load() + t.running.Load()
}
