package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/redisinfo"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Bounds on the steps of a run, so that it always ends by itself.
const (
	startLimit   = 60 * time.Second // a child's start-up line
	enqueueLimit = 20 * time.Minute // enqueueing one system's jobs
	stopGrace    = 15 * time.Second // SIGTERM to exit, before a kill
	apiLife      = 30 * time.Minute // an API process's life beyond its measurement
	rssEvery     = 200 * time.Millisecond
)

// target is a Redis the systems run on: a standalone server or a cluster.
type target struct {
	name    string
	addr    string   // standalone: host:port
	cluster []string // cluster: the masters' addresses
	// masters are one client per master, with one connection each, for
	// INFO and FLUSHALL: a new connection's handshake would otherwise be
	// counted between two INFOs.
	masters []*redis.Client
}

// sluiceArgs are the Redis flags of a sluice worker or enqueue.
func (t *target) sluiceArgs() []string {
	if t.cluster != nil {
		return []string{"-redis-cluster", strings.Join(t.cluster, ",")}
	}
	return []string{"-redis", "redis://" + t.addr + "/0"}
}

func (t *target) flush(ctx context.Context) error {
	for _, m := range t.masters {
		if err := m.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// info reads every master's counters.
func (t *target) info(ctx context.Context) ([]redisinfo.Snapshot, error) {
	out := make([]redisinfo.Snapshot, len(t.masters))
	for i, m := range t.masters {
		s, err := redisinfo.Read(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("INFO of %s: %w", m.Options().Addr, err)
		}
		out[i] = s
	}
	return out, nil
}

// env is what the cases of one run share: the built binaries, the Redis
// targets and the children still running.
type env struct {
	o            options
	dir          string
	self         string
	worker       string
	enqueue      string
	standalone   *target
	cluster      *target // nil unless a case needs it
	redisVersion string
	kids         proc.Group
	closers      []func()
}

// newEnv builds the binaries and starts the Redis targets the cases need.
// On error nothing is left running.
func newEnv(ctx context.Context, o options) (e *env, err error) {
	e = &env{o: o}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "sluice-scale-"); err != nil {
		return e, err
	}
	if !o.keep {
		e.closers = append(e.closers, func() { os.RemoveAll(e.dir) })
	}
	if e.self, err = os.Executable(); err != nil {
		return e, err
	}
	t0 := time.Now()
	if e.worker, e.enqueue, err = proc.BuildSluice(ctx, filepath.Join(e.dir, "bin")); err != nil {
		return e, err
	}
	e.logf("built cmd/worker and cmd/enqueue in %v", time.Since(t0).Round(time.Millisecond))
	needStandalone, needCluster := false, false
	for _, c := range o.cases {
		needCluster = needCluster || c.cluster
		needStandalone = needStandalone || !c.cluster
	}
	if needStandalone {
		srv, stop, err := redistest.Launch(redistest.Config{})
		if err != nil {
			return e, err
		}
		e.closers = append(e.closers, func() { _ = stop() })
		e.standalone = e.newTarget("standalone", srv.Addr(), nil)
		if err := e.capRedis(srv); err != nil {
			return e, err
		}
	}
	if needCluster {
		cl, stop, err := redistest.LaunchCluster()
		if err != nil {
			return e, err
		}
		e.closers = append(e.closers, stop)
		e.cluster = e.newTarget("cluster", "", cl.Addrs())
		for i := range cl.Addrs() {
			if err := e.capRedis(cl.Node(i)); err != nil {
				return e, err
			}
		}
	}
	t := e.standalone
	if t == nil {
		t = e.cluster
	}
	snap, err := redisinfo.Read(ctx, t.masters[0])
	if err != nil {
		return e, err
	}
	e.redisVersion = snap.Version
	return e, nil
}

// capRedis caps srv at -redis-cpu CPUs, if that is set.
func (e *env) capRedis(srv *redistest.Server) error {
	if e.o.redisCPU <= 0 {
		return nil
	}
	undo, err := capCPU(cgroupRoot, srv.PID(), e.o.redisCPU)
	if err != nil {
		return fmt.Errorf("-redis-cpu: %w", err)
	}
	e.closers = append(e.closers, func() { _ = undo() })
	e.logf("redis-server %s capped at %v CPUs", srv.Addr(), e.o.redisCPU)
	return nil
}

func (e *env) newTarget(name, addr string, cluster []string) *target {
	t := &target{name: name, addr: addr, cluster: cluster}
	addrs := cluster
	if addrs == nil {
		addrs = []string{addr}
	}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, PoolSize: 1, ConnMaxIdleTime: -1})
		t.masters = append(t.masters, c)
		e.closers = append(e.closers, func() { c.Close() })
	}
	return t
}

// close stops every child and the Redis targets, and removes the directory
// unless -keep; in reverse order of starting.
func (e *env) close() {
	e.kids.KillAll()
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func (e *env) logf(format string, args ...any) {
	if e.o.verbose {
		fmt.Fprintf(os.Stderr, "scale: "+format+"\n", args...)
	}
}

// sysResult is what one system did in one case.
type sysResult struct {
	system  string
	jobs    int
	enqueue time.Duration // enqueueing the jobs took
	window  time.Duration // the measurement, as it ran
	// delivered and refused are the API's 200s and 429s in the window.
	delivered, refused int64
	// api is the API's counters at the end of the window: the whole run.
	api apiStats
	// run is from the workers' start (every one ready) to the window's
	// end: api.OK over it is the delivered/s of the whole run.
	run time.Duration
	// redis is every master's counters over the window, summed;
	// perMaster each master's commands processed over the window.
	redis     redisinfo.Snapshot
	perMaster []int64
	rss       int64 // the workers' summed RSS at its peak, bytes; 0 when unknown
	notes     []string
}

func (r *sysResult) perSecond() float64 {
	if r.window <= 0 {
		return 0
	}
	return float64(r.delivered) / r.window.Seconds()
}

// fromStart is the delivered/s of the whole run, from the workers' start
// to the window's end. Where the API's quota sets the pace in the window
// (a burst of 40 a tenant, then 2 a second), the window's figure counts
// how much of the bursts the window holds: a system that sends them
// sooner leaves fewer for it. This one counts the bursts too.
func (r *sysResult) fromStart() float64 {
	if r.run <= 0 {
		return 0
	}
	return float64(r.api.OK) / r.run.Seconds()
}

// scriptCalls are the commands that run a script.
var scriptCalls = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// runSystem runs case c on one system, on t.
func (e *env) runSystem(ctx context.Context, c scaleCase, system string, t *target) (*sysResult, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	api, url, err := e.startAPI(ctx, c, system)
	if err != nil {
		return nil, err
	}
	defer api.Kill()
	res := &sysResult{system: system, jobs: e.o.jobCount(c)}
	t0 := time.Now()
	if system == sysSluice {
		err = e.enqueueSluice(ctx, c, t, url, res.jobs)
	} else {
		err = enqueuePeer(ctx, t, c, url, res.jobs)
	}
	if err != nil {
		return nil, fmt.Errorf("enqueueing: %w", err)
	}
	res.enqueue = time.Since(t0)
	e.logf("%s, %s: enqueued %d jobs in %v", c.name, system, res.jobs, res.enqueue.Round(time.Millisecond))

	t0 = time.Now()
	workers := make([]*proc.Child, e.o.workers)
	for i := range workers {
		name := fmt.Sprintf("%s worker %d", system, i+1)
		log := filepath.Join(e.dir, fmt.Sprintf("%s-%s-worker-%d.log", c.name, system, i+1))
		var w *proc.Child
		if system == sysSluice {
			args := append([]string{"-policy", e.policyPath(c), "-listen", "127.0.0.1:0",
				"-concurrency", strconv.Itoa(c.conc), "-shutdown-timeout", "5s"}, t.sluiceArgs()...)
			w, err = proc.Start(name, log, e.worker, args...)
		} else {
			w, err = proc.Start(name, log, e.self, e.o.peerConfig(c, system, t).args()...)
		}
		if err != nil {
			return nil, err
		}
		e.kids.Add(w)
		defer w.Kill()
		workers[i] = w
	}
	want := startedLine
	if system == sysSluice {
		want = "sluice worker started"
	}
	pids := make([]int, len(workers))
	for i, w := range workers {
		if _, err := w.WaitLine(ctx, want, startLimit); err != nil {
			return nil, err
		}
		pids[i] = w.Pid()
	}
	started := time.Now()
	rss := sampleRSS(pids, rssEvery)
	e.logf("%s, %s: %d workers started in %v; warm-up %v, then measuring %v", c.name, system, len(workers),
		time.Since(t0).Round(time.Millisecond), e.o.warmup, e.o.measure)
	if err := proc.Sleep(ctx, e.o.warmup); err != nil {
		rss.end()
		return nil, err
	}
	redis0, api0, err := e.readCounters(ctx, t, url)
	if err != nil {
		rss.end()
		return nil, err
	}
	if err := proc.Sleep(ctx, e.o.measure); err != nil {
		rss.end()
		return nil, err
	}
	redis1, api1, err := e.readCounters(ctx, t, url)
	if err != nil {
		rss.end()
		return nil, err
	}
	res.run = time.Since(started)
	if peak, ok := rss.end(); ok {
		res.rss = peak
	}
	res.window = redis1[0].At.Sub(redis0[0].At)
	res.delivered, res.refused, res.api = api1.OK-api0.OK, api1.Refused-api0.Refused, api1
	for i := range redis1 {
		d := redis1[i].Sub(redis0[i])
		res.perMaster = append(res.perMaster, d.Processed)
		if i == 0 {
			res.redis = d
		} else {
			res.redis = res.redis.Add(d)
		}
	}
	if api1.OK >= int64(res.jobs) {
		res.notes = append(res.notes, fmt.Sprintf("every one of the %d jobs was delivered by the end: the backlog ran dry (raise -max-jobs)", res.jobs))
	}
	for _, w := range workers {
		if w.Exited() {
			res.notes = append(res.notes, fmt.Sprintf("%s exited during the run (%v); its log ends: %s", w.Name, w.Err(), w.LastLines()))
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range workers {
		if w.Exited() {
			continue
		}
		wg.Go(func() {
			if err := w.Stop(stopGrace); err != nil {
				mu.Lock()
				res.notes = append(res.notes, fmt.Sprintf("%s after SIGTERM: %v", w.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	_ = api.Stop(stopGrace)
	return res, nil
}

// readCounters reads every master's INFO and the API's counters.
func (e *env) readCounters(ctx context.Context, t *target, url string) ([]redisinfo.Snapshot, apiStats, error) {
	snaps, err := t.info(ctx)
	if err != nil {
		return nil, apiStats{}, err
	}
	s, err := fetchStats(ctx, url)
	return snaps, s, err
}

// startAPI starts a fresh API process for case c and returns it with its
// URL.
func (e *env) startAPI(ctx context.Context, c scaleCase, system string) (*proc.Child, string, error) {
	cfg := c.api
	cfg.latencyMin, cfg.latencyMax = e.o.latencyMin, e.o.latencyMax
	cfg.life = e.o.warmup + e.o.measure + apiLife
	return proc.StartServer(ctx, &e.kids, "the API", filepath.Join(e.dir, c.name+"-"+system+"-api.log"), startLimit, e.self, cfg.args()...)
}

// fetchStats reads the API's counters.
func fetchStats(ctx context.Context, url string) (apiStats, error) {
	var s apiStats
	return s, proc.Stats(ctx, url, &s)
}

// tenantName is tenant i's id.
func tenantName(i int) string { return "shop-" + strconv.Itoa(i) }

// jobURL is the URL job n of tenant calls.
func jobURL(base, tenant string, n int) string {
	return base + "/t/" + tenant + "/" + strconv.Itoa(n)
}

func (e *env) policyPath(c scaleCase) string { return filepath.Join(e.dir, c.name+"-policy.yaml") }

// policyYAML is sluice's policy file for case c against the API at url:
// one downstream "api", per tenant at the Shopify quota (with burst
// -sluice-burst), or, against one global bucket, that bucket's rate and
// capacity for the whole downstream.
func (o options) policyYAML(c scaleCase, url string, jobs int) string {
	var b strings.Builder
	shards, bound := 1, jobs+1000
	if c.cluster {
		// Each shard holds its share of the bound, and tenants hash to
		// shards unevenly: room for the fullest.
		shards, bound = o.shards, jobs*3/2+1000
	}
	fmt.Fprintf(&b, "queue:\n  name: scale\n  bound: %d\n  shards: %d\n  prefetch: %d\ndownstreams:\n  api:\n    base_url: %s/t/\n",
		bound, shards, 2*o.workers*c.conc, url)
	if c.api.mode == modeGlobal {
		fmt.Fprintf(&b, "    rate: %d\n    per: 1s\n    burst: %d\n    guard: %v\n", c.api.rate, c.api.capacity, sluiceGuard)
	} else {
		fmt.Fprintf(&b, "    rate: %d\n    per: 1s\n    burst: %d\n    guard: %v\n    per_tenant: true\n", shopRate, o.sluiceBurst, sluiceGuard)
	}
	return b.String()
}

// sluiceGuard is the policy's guard (throttle.Limit.Guard): the API
// meters each call at arrival with a bucket the size of sluice's burst,
// and the burst's calls, sent in the workers' start-up rush, reach it
// later than the paced calls after them (docs/throttle.md, Burst and the
// guard).
const sluiceGuard = 250 * time.Millisecond

// peerConfig is a peer's worker for case c: the recipe's limiter at the
// quota the API enforces (per tenant, or one global key), or at the
// Shopify quota per tenant against an API without a limit.
func (o options) peerConfig(c scaleCase, system string, t *target) workerConfig {
	w := workerConfig{system: system, redis: t.addr, cluster: strings.Join(t.cluster, ","), concurrency: c.conc,
		key: "tenant", rate: shopRate, burst: shopCapacity, check: o.peerCheck}
	if c.api.mode == modeGlobal {
		w.key, w.rate, w.burst = "global", c.api.rate, c.api.capacity
	}
	return w
}

// enqueueSluice writes the policy and the jobs as JSON lines, and enqueues
// them with the built enqueue binary, several processes at once.
func (e *env) enqueueSluice(ctx context.Context, c scaleCase, t *target, url string, jobs int) error {
	if err := os.WriteFile(e.policyPath(c), []byte(e.o.policyYAML(c, url, jobs)), 0o600); err != nil {
		return err
	}
	dir := filepath.Join(e.dir, c.name+"-jobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	files, err := proc.WriteJobs(dir, jobs, min(e.o.enqueueProcs, 1+jobs/2000), jobLine(url, c.tenants))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, enqueueLimit)
	defer cancel()
	return proc.Enqueue(ctx, e.enqueue, append([]string{"-policy", e.policyPath(c)}, t.sluiceArgs()...), files)
}

// jobLine gives job n's JSON line: a sluice.http GET of the API at url
// for tenant n mod tenants.
func jobLine(url string, tenants int) func(n int) string {
	return func(n int) string {
		tenant := tenantName(n % tenants)
		return fmt.Sprintf(`{"tenant":%q,"type":"sluice.http","downstream":"api","payload":{"url":%q}}`, tenant, jobURL(url, tenant, n))
	}
}

// enqueuePeer enqueues the same jobs as asynq tasks on the default queue,
// from this process, several at once.
func enqueuePeer(ctx context.Context, t *target, c scaleCase, url string, jobs int) error {
	const goroutines = 16
	rc := newRedis(t.addr, strings.Join(t.cluster, ","), goroutines)
	defer rc.Close()
	client := asynq.NewClientFromRedisClient(rc)
	ctx, cancel := context.WithTimeout(ctx, enqueueLimit)
	defer cancel()
	var next atomic.Int64
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= jobs {
					return
				}
				tenant := tenantName(n % c.tenants)
				payload, _ := json.Marshal(callPayload{Tenant: tenant, URL: jobURL(url, tenant, n)})
				if _, err := client.EnqueueContext(ctx, asynq.NewTask(taskType, payload, asynq.MaxRetry(25))); err != nil {
					errs[g] = fmt.Errorf("job %d: %w", n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// machine describes the machine, for the report's header.
func machine() string {
	return fmt.Sprintf("%d CPUs, %s/%s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}
