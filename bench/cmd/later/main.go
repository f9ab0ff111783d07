// Command later measures how late delayed jobs start: jobs enqueued with a
// due time a few seconds ahead, spread over a span, run by an otherwise
// idle fleet against a loopback API that records, for every call, how
// long after the job's due time it arrived. It runs, in one run:
//
//   - sluice: sluice.http jobs with run_at, enqueued with the built
//     enqueue -f, run by the built worker processes under a policy of one
//     downstream at a rate far above the jobs' own;
//   - asynq: the same jobs as asynq tasks with asynq.ProcessAt, run by
//     cmd/scale's bare peer worker (no limiter) at asynq's default
//     DelayedTaskCheckInterval (5 s).
//
// It prints a markdown table of the lateness (p50, p99, max) and the early
// starts of each, and judges sluice against its targets (p99 ≤ 1 s, max
// ≤ 2 s, no early start).
//
//	go run ./cmd/later
//	go run ./cmd/later -jobs 500 -spread 10s -systems sluice
//
// Everything listens on 127.0.0.1; every child process is killed on the
// way out (and, on Linux, dies with the benchmark even if it is killed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/pacestat"
	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/redistest"
)

// apiArg is the hidden first argument that makes this binary the API.
const apiArg = "api"

// The systems.
const (
	sysSluice = "sluice"
	sysAsynq  = "asynq"
)

// The peer worker of cmd/scale: its task type, payload, and the line it
// prints once its asynq server runs.
const (
	peerTaskType = "scale:call"
	peerStarted  = "scale worker started"
)

// Targets for sluice.
const (
	targetP99 = time.Second
	targetMax = 2 * time.Second
)

// Bounds on the steps of a run, so that it always ends by itself.
const (
	startLimit = 60 * time.Second
	stopGrace  = 15 * time.Second
	apiLife    = 30 * time.Minute
)

type options struct {
	jobs, tenants, workers, conc int
	spread, lead, tail           time.Duration
	systems                      []string
	keep, verbose                bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == apiArg {
		if err := proc.Serve(newRecorder(), apiLife); err != nil {
			fmt.Fprintln(os.Stderr, "later api:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "later:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	met, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "later:", err)
		os.Exit(1)
	}
	if !met {
		os.Exit(3)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("later", flag.ContinueOnError)
	fs.IntVar(&o.jobs, "jobs", 2000, "delayed jobs per system")
	fs.IntVar(&o.tenants, "tenants", 50, "tenants the jobs are spread over (job n is tenant n mod this)")
	fs.DurationVar(&o.spread, "spread", 30*time.Second, "the due times are spread evenly over this span")
	fs.DurationVar(&o.lead, "lead", 5*time.Second, "the first due time is this long after the jobs are written, before enqueueing and the workers' start")
	fs.DurationVar(&o.tail, "tail", 20*time.Second, "after the last due time, how long to wait for the calls still missing")
	fs.IntVar(&o.workers, "workers", 3, "worker processes of each system")
	fs.IntVar(&o.conc, "conc", 10, "goroutines of each worker process (sluice's -concurrency, asynq's Concurrency)")
	systems := fs.String("systems", "sluice,asynq", "the systems to run, comma-separated")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (binaries, policy, job files, logs)")
	fs.BoolVar(&o.verbose, "v", false, "say what each step does (on standard error)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.jobs < 1 || o.tenants < 1 || o.workers < 1 || o.conc < 1 || o.spread < 0 || o.lead <= 0 || o.tail <= 0 {
		return o, errors.New("-jobs, -tenants, -workers, -conc, -lead and -tail must be positive, -spread not negative")
	}
	for s := range strings.SplitSeq(*systems, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case sysSluice, sysAsynq:
			if !slices.Contains(o.systems, s) {
				o.systems = append(o.systems, s)
			}
		default:
			return o, fmt.Errorf("-systems: unknown system %q (sluice, asynq)", s)
		}
	}
	if len(o.systems) == 0 {
		return o, errors.New("-systems: none chosen")
	}
	return o, nil
}

// recorder is the API: every GET of /t/<tenant>/<n>?at=<unix ms> is
// answered 200 at once and recorded as job n, arriving now − at late.
// GET /stats returns the record.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

// call is one call the API recorded.
type call struct {
	N    int   `json:"n"`
	Late int64 `json:"late_us"` // arrival − due, µs; negative: early
}

func newRecorder() *recorder { return &recorder{} }

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	if req.URL.Path == "/stats" {
		r.mu.Lock()
		b, err := json.Marshal(r.calls)
		r.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	}
	at, err := strconv.ParseInt(req.URL.Query().Get("at"), 10, 64)
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var n int
	if err == nil && len(parts) == 3 && parts[0] == "t" {
		n, err = strconv.Atoi(parts[2])
	} else if err == nil {
		err = errors.New("want /t/<tenant>/<n>")
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("bad call %s: %v", req.URL, err), http.StatusBadRequest)
		return
	}
	late := now.Sub(time.UnixMilli(at)).Microseconds()
	r.mu.Lock()
	r.calls = append(r.calls, call{N: n, Late: late})
	r.mu.Unlock()
}

// summary is what one system did.
type summary struct {
	system        string
	calls         int // calls the API recorded
	missing       int // jobs never called
	repeats       int // calls of a job beyond its first
	p50, p99, max time.Duration
	early         int           // calls before their due time
	earliest      time.Duration // the least lateness of any call; negative: early by that much
	notes         []string
}

// summarize judges the calls of jobs jobs 0..jobs-1: the lateness of each
// job's first call, the early calls (any call), the repeats and the jobs
// never called.
func summarize(system string, jobs int, calls []call) summary {
	s := summary{system: system, calls: len(calls)}
	first := make([]bool, jobs)
	var late []time.Duration
	for i, c := range calls {
		if d := time.Duration(c.Late) * time.Microsecond; i == 0 || d < s.earliest {
			s.earliest = d
		}
		if c.Late < 0 {
			s.early++
		}
		if c.N < 0 || c.N >= jobs {
			s.repeats++ // not one of this run's jobs
			continue
		}
		if first[c.N] {
			s.repeats++
			continue
		}
		first[c.N] = true
		late = append(late, time.Duration(c.Late)*time.Microsecond)
	}
	s.missing = jobs - len(late)
	s.p50 = pacestat.Quantile(late, 0.5)
	s.p99 = pacestat.Quantile(late, 0.99)
	if len(late) > 0 {
		s.max = slices.Max(late)
	}
	return s
}

// met reports whether s meets sluice's targets.
func (s summary) met() bool {
	return s.missing == 0 && s.early == 0 && s.p99 <= targetP99 && s.max <= targetMax
}

// env is what the systems of one run share.
type env struct {
	o                 options
	dir               string
	self, worker, enq string
	peer              string // cmd/scale, for its peer worker
	redisAddr         string
	rc                *redis.Client
	kids              proc.Group
	closers           []func()
}

func (e *env) logf(format string, args ...any) {
	if e.o.verbose {
		fmt.Fprintf(os.Stderr, "later: "+format+"\n", args...)
	}
}

func (e *env) close() {
	e.kids.KillAll()
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func run(ctx context.Context, o options) (met bool, err error) {
	e := &env{o: o}
	defer e.close()
	if e.dir, err = os.MkdirTemp("", "sluice-later-"); err != nil {
		return false, err
	}
	if !o.keep {
		e.closers = append(e.closers, func() { os.RemoveAll(e.dir) })
	} else {
		fmt.Fprintln(os.Stderr, "later: keeping", e.dir)
	}
	if e.self, err = os.Executable(); err != nil {
		return false, err
	}
	bin := filepath.Join(e.dir, "bin")
	if slices.Contains(o.systems, sysSluice) {
		if e.worker, e.enq, err = proc.BuildSluice(ctx, bin); err != nil {
			return false, err
		}
	}
	if slices.Contains(o.systems, sysAsynq) {
		e.peer = filepath.Join(bin, "scale")
		if msg, err := exec.CommandContext(ctx, "go", "build", "-o", e.peer, "./cmd/scale").CombinedOutput(); err != nil {
			return false, fmt.Errorf("go build ./cmd/scale (run this from the bench directory): %w\n%s", err, msg)
		}
	}
	e.logf("built the binaries")
	srv, stopRedis, err := redistest.Launch(redistest.Config{})
	if err != nil {
		return false, err
	}
	e.closers = append(e.closers, func() { _ = stopRedis() })
	e.redisAddr = srv.Addr()
	e.rc = redis.NewClient(&redis.Options{Addr: e.redisAddr})
	e.closers = append(e.closers, func() { e.rc.Close() })

	var results []summary
	for _, sys := range o.systems {
		s, err := e.runSystem(ctx, sys)
		if err != nil {
			return false, fmt.Errorf("%s: %w", sys, err)
		}
		results = append(results, s)
	}
	met = true
	fmt.Print(report(o, results))
	for _, s := range results {
		if s.system == sysSluice {
			met = s.met()
		}
	}
	return met, nil
}

// jobURL is job n's URL at the API: its tenant, its number and its due
// time in unix milliseconds.
func jobURL(base string, n, tenants int, due time.Time) string {
	return fmt.Sprintf("%s/t/tenant-%d/%d?at=%d", base, n%tenants, n, due.UnixMilli())
}

// dueTimes are the jobs' due times: spread evenly over -spread from
// -lead after now, whole milliseconds.
func (o options) dueTimes(now time.Time) []time.Time {
	first := now.Add(o.lead).Truncate(time.Millisecond)
	out := make([]time.Time, o.jobs)
	for n := range out {
		out[n] = first.Add(time.Duration(int64(o.spread) * int64(n) / int64(o.jobs))).Truncate(time.Millisecond)
	}
	return out
}

func (e *env) runSystem(ctx context.Context, sys string) (summary, error) {
	if err := e.rc.FlushAll(ctx).Err(); err != nil {
		return summary{}, err
	}
	api, url, err := proc.StartServer(ctx, &e.kids, "the API", filepath.Join(e.dir, sys+"-api.log"), startLimit, e.self, apiArg)
	if err != nil {
		return summary{}, err
	}
	defer api.Kill()
	due := e.o.dueTimes(time.Now())
	t0 := time.Now()
	if sys == sysSluice {
		err = e.enqueueSluice(ctx, url, due)
	} else {
		err = e.enqueueAsynq(ctx, url, due)
	}
	if err != nil {
		return summary{}, fmt.Errorf("enqueueing: %w", err)
	}
	e.logf("%s: enqueued %d jobs in %v", sys, len(due), time.Since(t0).Round(time.Millisecond))

	var workers []*proc.Child
	for i := range e.o.workers {
		name := fmt.Sprintf("%s worker %d", sys, i+1)
		log := filepath.Join(e.dir, fmt.Sprintf("%s-worker-%d.log", sys, i+1))
		var w *proc.Child
		if sys == sysSluice {
			w, err = proc.Start(name, log, e.worker, "-policy", e.policyPath(), "-redis", "redis://"+e.redisAddr+"/0",
				"-listen", "127.0.0.1:0", "-concurrency", strconv.Itoa(e.o.conc), "-shutdown-timeout", "5s")
		} else {
			w, err = proc.Start(name, log, e.peer, "worker", "-system", "bare", "-redis", e.redisAddr,
				"-concurrency", strconv.Itoa(e.o.conc))
		}
		if err != nil {
			return summary{}, err
		}
		e.kids.Add(w)
		defer w.Kill()
		workers = append(workers, w)
	}
	want := peerStarted
	if sys == sysSluice {
		want = "sluice worker started"
	}
	for _, w := range workers {
		if _, err := w.WaitLine(ctx, want, startLimit); err != nil {
			return summary{}, err
		}
	}
	var notes []string
	if started := time.Now(); started.After(due[0]) {
		notes = append(notes, fmt.Sprintf("the workers were up %v after the first due time: raise -lead", started.Sub(due[0]).Round(time.Millisecond)))
	} else {
		e.logf("%s: workers up %v before the first due time", sys, due[0].Sub(started).Round(time.Millisecond))
	}

	// Wait for every job's call, or the tail after the last due time.
	deadline := due[len(due)-1].Add(e.o.tail)
	var calls []call
	for {
		if calls, err = fetchCalls(ctx, url); err != nil {
			return summary{}, err
		}
		if len(calls) >= len(due) || time.Now().After(deadline) {
			break
		}
		if err := proc.Sleep(ctx, 250*time.Millisecond); err != nil {
			return summary{}, err
		}
	}
	// Let a repeat that was on its way arrive.
	if err := proc.Sleep(ctx, 500*time.Millisecond); err != nil {
		return summary{}, err
	}
	if calls, err = fetchCalls(ctx, url); err != nil {
		return summary{}, err
	}
	for _, w := range workers {
		if w.Exited() {
			notes = append(notes, fmt.Sprintf("%s exited during the run (%v): %s", w.Name, w.Err(), w.LastLines()))
			continue
		}
		if err := w.Stop(stopGrace); err != nil {
			notes = append(notes, fmt.Sprintf("%s after SIGTERM: %v", w.Name, err))
		}
	}
	_ = api.Stop(stopGrace)
	s := summarize(sys, len(due), calls)
	s.notes = notes
	return s, nil
}

func (e *env) policyPath() string { return filepath.Join(e.dir, "policy.yaml") }

// enqueueSluice writes the policy (one downstream far faster than the
// jobs) and the jobs as JSON lines with run_at, and enqueues them with
// the built enqueue -f.
func (e *env) enqueueSluice(ctx context.Context, url string, due []time.Time) error {
	policy := fmt.Sprintf("queue:\n  name: later\n  bound: %d\ndownstreams:\n  api:\n    base_url: %s/t/\n    rate: 10000\n    per: 1s\n    burst: 1000\n",
		len(due)+1000, url)
	if err := os.WriteFile(e.policyPath(), []byte(policy), 0o600); err != nil {
		return err
	}
	files, err := proc.WriteJobs(e.dir, len(due), 1, func(n int) string {
		return fmt.Sprintf(`{"tenant":"tenant-%d","type":"sluice.http","downstream":"api","run_at":%q,"payload":{"url":%q}}`,
			n%e.o.tenants, due[n].UTC().Format("2006-01-02T15:04:05.000Z07:00"), jobURL(url, n, e.o.tenants, due[n]))
	})
	if err != nil {
		return err
	}
	return proc.Enqueue(ctx, e.enq, []string{"-policy", e.policyPath(), "-redis", "redis://" + e.redisAddr + "/0"}, files)
}

// enqueueAsynq enqueues the same jobs as tasks of cmd/scale's peer worker
// with asynq.ProcessAt.
func (e *env) enqueueAsynq(ctx context.Context, url string, due []time.Time) error {
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: e.redisAddr})
	defer client.Close()
	for n, at := range due {
		tenant := "tenant-" + strconv.Itoa(n%e.o.tenants)
		payload, _ := json.Marshal(map[string]string{"t": tenant, "u": jobURL(url, n, e.o.tenants, at)})
		if _, err := client.EnqueueContext(ctx, asynq.NewTask(peerTaskType, payload), asynq.ProcessAt(at)); err != nil {
			return fmt.Errorf("job %d: %w", n, err)
		}
	}
	return nil
}

func fetchCalls(ctx context.Context, url string) ([]call, error) {
	var calls []call
	return calls, proc.Stats(ctx, url, &calls)
}

// report is the markdown table of the run.
func report(o options, rs []summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Delayed jobs: lateness\n\n%d jobs over %d tenants, due times spread evenly over %v from %v ahead; %d worker processes × %d goroutines; the API answers at once.\n\n",
		o.jobs, o.tenants, o.spread, o.lead, o.workers, o.conc)
	b.WriteString("| system | calls | missing | repeats | p50 late | p99 late | max late | early starts | earliest |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range rs {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %s | %s | %d | %s |\n", s.system, s.calls, s.missing, s.repeats,
			ms(s.p50), ms(s.p99), ms(s.max), s.early, ms(s.earliest))
	}
	for _, s := range rs {
		if s.system != sysSluice {
			continue
		}
		verdict := "met"
		if !s.met() {
			verdict = "missed"
		}
		fmt.Fprintf(&b, "\nsluice's targets (p99 ≤ %v, max ≤ %v, no early start, none missing): %s.\n", targetP99, targetMax, verdict)
	}
	for _, s := range rs {
		for _, n := range s.notes {
			fmt.Fprintf(&b, "\nNote (%s): %s\n", s.system, n)
		}
	}
	return b.String()
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}
