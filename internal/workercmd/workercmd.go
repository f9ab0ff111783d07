// Package workercmd is the sluice worker process: flags, environment and
// policy file in; the queue's workers, the dispatcher, POST /enqueue, the
// sluice page at /, /metrics and /healthz out. cmd/worker only calls Main.
package workercmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/throttle"
)

// options are the worker's settings, from flags and environment.
type options struct {
	redis           redisconn.Flags
	policy, listen  string
	allowedHosts    string
	hosts           []string // allowedHosts, parsed
	concurrency     int
	fallback        float64
	shutdown        time.Duration
	demo            bool
	demoFor         time.Duration
	demoRate        int64
	monitorReadOnly bool
	allowEvicting   bool
	redisCheckEvery time.Duration
	limits          serverLimits // defaultLimits unless a test sets them
	page            pageLimits   // defaultPageLimits unless a test sets them
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.redis.URL, "redis", os.Getenv("SLUICE_REDIS_URL"), "Redis URL: redis://[user:pass@]host:port/db, or rediss:// for TLS; \"embedded\" starts an in-memory Redis whose jobs are lost on exit (env SLUICE_REDIS_URL)")
	fs.BoolVar(&o.allowEvicting, "allow-evicting-redis", envBool("SLUICE_ALLOW_EVICTING_REDIS"), "run on a Redis whose maxmemory-policy may evict keys, which loses jobs when it is full; warns, and sets sluice_redis_evicting (env SLUICE_ALLOW_EVICTING_REDIS)")
	fs.DurationVar(&o.redisCheckEvery, "redis-check-every", 5*time.Second, "how often the worker checks that Redis kept its data (a marker key) and reads its memory use")
	fs.StringVar(&o.redis.CAFile, "redis-ca", os.Getenv("SLUICE_REDIS_CA"), "PEM file of the CAs to trust for rediss:// instead of the system's (env SLUICE_REDIS_CA)")
	fs.StringVar(&o.redis.Cluster, "redis-cluster", os.Getenv("SLUICE_REDIS_CLUSTER"), "comma-separated Redis Cluster addresses; -redis then only gives credentials and TLS (env SLUICE_REDIS_CLUSTER)")
	fs.StringVar(&o.policy, "policy", os.Getenv("SLUICE_POLICY"), "policy file (YAML): queue, downstreams, tenants; see docs/policy.md (env SLUICE_POLICY)")
	fs.StringVar(&o.listen, "listen", cmp.Or(os.Getenv("SLUICE_LISTEN"), "127.0.0.1:9090"), "address of the sluice page (/), /metrics, /healthz and POST /enqueue; loopback unless you mean it (env SLUICE_LISTEN)")
	fs.StringVar(&o.allowedHosts, "allowed-hosts", os.Getenv("SLUICE_ALLOWED_HOSTS"), "comma-separated Host names the HTTP endpoints answer to besides the listen address (and localhost, 127.0.0.1, [::1] on a loopback or all-addresses listener): name for any port, name:port for one (env SLUICE_ALLOWED_HOSTS)")
	fs.IntVar(&o.concurrency, "concurrency", 10, "jobs this process runs at once")
	fs.Float64Var(&o.fallback, "fallback", 0, "share of each downstream's rate this process may use on its own while Redis is unreachable; 0 fails closed")
	fs.DurationVar(&o.shutdown, "shutdown-timeout", 30*time.Second, "how long SIGTERM lets running jobs finish")
	fs.BoolVar(&o.monitorReadOnly, "monitor-read-only", true, "serve asynqmon's UI at /monitoring/ read-only (false lets it delete and retry tasks)")
	fs.BoolVar(&o.demo, "demo", false, "run the whole system in this process: embedded Redis, a fake downstream with a quota, producers and workers")
	fs.DurationVar(&o.demoFor, "demo-duration", 20*time.Second, "how long the demo runs (0: until interrupted)")
	fs.Int64Var(&o.demoRate, "demo-quota", 50, "the demo downstream's quota, calls per second")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !o.demo && o.policy == "" {
		return o, errors.New("-policy is required (or -demo)")
	}
	if o.redisCheckEvery <= 0 {
		return o, fmt.Errorf("-redis-check-every must be above 0, got %v", o.redisCheckEvery)
	}
	var err error
	if o.hosts, err = parseAllowedHosts(o.allowedHosts); err != nil {
		return o, err
	}
	if o.concurrency < 1 {
		return o, fmt.Errorf("-concurrency must be at least 1, got %d", o.concurrency)
	}
	return o, nil
}

// Main runs the worker until ctx is done or SIGINT/SIGTERM, and returns
// the process's exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	// go-redis would print a line per failed dial before our one error.
	redisconn.RouteDriverLog(log)
	if o.demo {
		return runDemo(ctx, o, stdout, stderr)
	}
	cfg, err := policy.Load(o.policy)
	if err != nil {
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 2
	}
	// The embedded Redis only when asked for: a worker that forgot -redis
	// would accept jobs and lose them on exit.
	if !o.redis.Configured() && o.redis.CAFile == "" {
		fmt.Fprintln(stderr, "sluice worker:", notConfigured)
		return 2
	}
	client, closeRedis, embedded, err := connect(ctx, o.redis, false, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 1
	}
	defer closeRedis()
	if err := checkRedis(ctx, client, o.allowEvicting, embedded, log); err != nil {
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 1
	}
	w, err := newWorker(client, cfg, o, log, prometheus.NewRegistry())
	if err != nil {
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 1
	}
	if err := w.run(ctx); err != nil {
		fmt.Fprintln(stderr, "sluice worker:", err)
		return 1
	}
	return 0
}

// worker is one running worker process.
type worker struct {
	cfg      *policy.Config
	o        options
	log      *slog.Logger
	reg      *prometheus.Registry
	th       *throttle.Throttle
	producer *queue.Producer
	server   *queue.Server
	http     *http.Server
	ln       net.Listener
	handlers *queue.ServeMux
	calls    callCounts // for the page
	watch    *redisWatch
	// downstreams are the policy's downstreams' names, sorted, for the
	// page.
	downstreams []string
}

func newWorker(client redis.UniversalClient, cfg *policy.Config, o options, log *slog.Logger, reg *prometheus.Registry) (*worker, error) {
	w := &worker{cfg: cfg, o: o, log: log, reg: reg, downstreams: slices.Sorted(maps.Keys(cfg.Downstreams))}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	thMetrics, err := throttle.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	dsMetrics, err := downstream.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	qMetrics, err := queue.NewMetrics(reg, cfg.Queue.Name)
	if err != nil {
		return nil, err
	}
	w.th, err = throttle.New(client, &throttle.Options{Fallback: o.fallback, Metrics: thMetrics, Logger: log, Subscribe: true})
	if err != nil {
		return nil, err
	}
	if w.watch, err = newRedisWatch(client, cmp.Or(o.redisCheckEvery, 5*time.Second), log, reg); err != nil {
		return nil, err
	}
	qc := cfg.QueueConfig()
	qc.AllowEviction = o.allowEvicting
	if w.producer, err = queue.NewProducer(client, &qc); err != nil {
		return nil, err
	}
	downstreams := func(name string) (queue.Downstream, bool) {
		d, ok := cfg.Downstreams[name]
		return d, ok
	}
	w.server, err = queue.NewServer(client, &queue.ServerConfig{
		Config:          qc,
		Concurrency:     o.concurrency,
		Prefetch:        cfg.Queue.Prefetch,
		Throttle:        w.th,
		Downstreams:     downstreams,
		ShutdownTimeout: o.shutdown,
		Retention:       cfg.Queue.Retention,
		Logger:          log,
		Metrics:         qMetrics,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := client.Ping(ctx).Err(); err != nil {
			http.Error(rw, "redis: unreachable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	mux.Handle("/enqueue", queue.HTTPHandler(w.producer))
	mux.HandleFunc("GET /{$}", w.page)
	// asynqmon is not closed: its Close would close client, the caller's.
	mux.Handle("/monitoring/", asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: sharedConn{client},
		ReadOnly: o.monitorReadOnly, PayloadFormatter: asynqmon.PayloadFormatterFunc(redactedPayload)}))
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("-listen %s: %w", o.listen, err)
	}
	lim := cmp.Or(o.limits, defaultLimits)
	cl := newConnLimiter(ln, lim.MaxConns)
	w.ln = cl
	w.http = &http.Server{
		Handler:           newHostGuard(o.listen, w.ln.Addr(), o.hosts, mux),
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		ConnState:         cl.connState,
	}
	if tcp, ok := w.ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("sluice: the HTTP endpoints (including POST /enqueue) listen beyond loopback; put them behind something that authenticates", "addr", w.ln.Addr().String())
		if tcp.IP.IsUnspecified() && len(o.hosts) == 0 {
			log.Warn("sluice: listening on every address, the HTTP endpoints answer only to localhost, 127.0.0.1 and [::1]: give the names clients use with -allowed-hosts", "addr", w.ln.Addr().String())
		}
	}
	// The worker's handlers: the built-in HTTP job. Go's default transport
	// keeps 2 idle connections a host: with more calls in flight to one
	// downstream, every call beyond them would open (and close) a
	// connection of its own, whose set-up delays the call past its slot.
	// NewBase limits a response's header to 64 KiB.
	base := downstream.NewBase()
	base.MaxIdleConnsPerHost = max(o.concurrency, 2)
	w.handlers = queue.NewServeMux()
	w.handlers.Handle(httpjob.Type, &httpjob.Handler{
		Throttle: w.th,
		Metrics:  dsMetrics,
		Base:     base,
		Resolve:  cfg.ResolveHTTP,
	})
	return w, nil
}

// run serves until ctx is done, then shuts down gracefully: the HTTP
// endpoint stops taking jobs, the dispatcher stops, running jobs get the
// shutdown timeout to finish and the rest return to the queue.
func (w *worker) run(ctx context.Context) error {
	var tally jobTally
	if err := w.server.Start(tally.wrap(w.handlers)); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() {
		if err := w.http.Serve(w.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	go w.watch.loop(ctx)
	base := "http://" + w.ln.Addr().String()
	w.log.Info("sluice worker started", "queue", w.cfg.Queue.Name, "listen", w.ln.Addr().String(), "concurrency", w.o.concurrency,
		"page", base+"/", "metrics", base+"/metrics", "healthz", base+"/healthz", "enqueue", "POST "+base+"/enqueue", "monitoring", base+"/monitoring/")
	go func() {
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				all, refused := w.responsesByDownstream()
				w.calls.sample(now, all, refused)
			}
		}
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	running := tally.stop()
	w.log.Info("sluice worker stopping", "running", running, "shutdown_timeout", w.o.shutdown)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.http.Shutdown(sctx)
	w.server.Shutdown()
	finished, returned := tally.afterStop()
	w.log.Info("sluice worker stopped", "jobs_run", tally.total.Load(), "running_at_stop", running,
		"finished_after_stop", finished, "returned_to_queue", returned)
	w.th.Close()
	return err
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

// envBool reads a boolean environment variable; unset or not a boolean
// is false.
func envBool(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}
