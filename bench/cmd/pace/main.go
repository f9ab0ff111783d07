// Command pace measures how evenly calls reach a rate-limited downstream
// when many worker processes pace them together.
//
// It starts its own redis-server on a free loopback port, without
// persistence ($SLUICE_REDIS_SERVER when that is set, else redis-server on
// the PATH; see internal/redistest), and, in its own process, a
// downstreamtest.Server that enforces the quota strictly (a GCRA with a
// tolerance of max(2, 1% of a second's quota) calls: an early call gets
// 429) and records every arrival. Then, for each quota and one after
// another, it runs each approach for -duration:
//
//   - sluice: -procs worker processes × -goroutines goroutines, each
//     looping throttle.Wait on one shared key, then a GET;
//   - rate.Limiter per process: the same fleet, each process with its own
//     golang.org/x/time/rate limiter at the full quota (the usual asynq
//     recipe);
//   - redis_rate: the same fleet looping redis_rate.Allow, sleeping
//     RetryAfter when refused, at burst 5 and at its default burst (the
//     quota);
//   - floor: one process whose procs×goroutines goroutines share one
//     rate.Limiter: the best this machine can do.
//
// Every run gets a fresh downstreamtest.Server and a flushed Redis. The figures cover
// the steady state: the first and last -trim of arrivals are left out.
// Workers are this binary started again with a hidden argument; each stops
// by itself at the end of its run, and dies with the benchmark on Linux.
//
// For each quota it prints a markdown table (achieved and sent rate as a
// share of the quota, the most calls in any sliding 1 s and 100 ms window,
// the coefficient of variation of the gaps between calls, 429s, calls,
// Redis commands per call as sent by the workers and as counted by the
// server), the targets for sluice, and diagnostics: CPU per call,
// time in Wait beyond the delay, HTTP round trips, and the stalls of every
// process and of redis-server during each run.
//
// On a machine shared with other work, -rounds N runs every approach N
// times, taking turns, and pools the runs, so that a busy minute does not
// land on one approach only. -profile DIR writes each worker's CPU
// profile.
//
//	go run ./cmd/pace -procs 4 -goroutines 8 -rate 200 -duration 20s
//	go run ./cmd/pace -quotas 200,1000 -plot pace.png
//	go run ./cmd/pace -quotas 200 -rounds 3 -approaches sluice,floor
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	benchstat "github.com/sluicehq/sluice/bench/internal/pacestat"
	"github.com/sluicehq/sluice/bench/internal/redisinfo"
	"github.com/sluicehq/sluice/bench/internal/sysstat"
	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// approach is one way of pacing, as run by the benchmark.
type approach struct {
	id         string // for -approaches
	label      string // the table's first column
	kind       string
	procs      int
	goroutines int
	burst      int // redis_rate only; -1 for the quota
}

// segment is one run of an approach at one quota.
type segment struct {
	round    int
	start    time.Time // when the workers started calling
	arrivals []time.Time
	refused  []bool // which arrivals got 429 (a replay of the server's rule)
	window   benchstat.Window
	steady   bool

	allCalls, allLimited int // over the whole run, as the server counted

	sentCmds  int64 // commands the workers sent in [start+trim, end-trim)
	sentCalls int   // downstream calls in the same span
	server    serverDelta
	srvCalls  int // downstream calls between the INFO samples

	workers []workerResult
	load    float64 // 1-minute load average at the end
	parent  stalls  // this process (the downstream's) over the steady window
	redis   stalls  // PING round trips over the steady window

	parentCPU time.Duration // this process's CPU time over the steady window
	notes     []string
}

// row is an approach at one quota: its runs and the pooled figures.
type row struct {
	a     approach
	quota int64
	segs  []*segment

	steady               bool
	secs                 float64 // steady seconds, all runs
	achieved, sent       float64 // accepted and all calls per second, as a share of the quota
	max1s, max100        int
	cv                   float64
	limited, calls       int // in the steady windows
	allLimited, allCalls int
	clientCmds           float64 // commands sent by the workers per call
	serverCmds           float64 // commands the server ran (in scripts too) per call
	scripts              float64 // script invocations per call
}

// out receives the report; tests replace it.
var out io.Writer = os.Stdout

type options struct {
	procs, goroutines int
	quotas            []int64
	duration, trim    time.Duration
	lead              time.Duration
	rounds            int
	plot              string
	profile           string
	approaches        map[string]bool
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == workerArg {
		if err := runWorker(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "pace worker:", err)
			os.Exit(1)
		}
		return
	}
	opts, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pace:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err = run(ctx, opts)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pace:", err)
		os.Exit(1)
	}
}

func parseFlags() (options, error) {
	var o options
	var rateFlag int64
	var quotas, approaches string
	flag.IntVar(&o.procs, "procs", 4, "worker processes per approach")
	flag.IntVar(&o.goroutines, "goroutines", 8, "goroutines per worker process")
	flag.Int64Var(&rateFlag, "rate", 200, "the downstream's quota in calls per second")
	flag.StringVar(&quotas, "quotas", "", "several quotas, comma separated (overrides -rate)")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long each run of an approach lasts")
	flag.DurationVar(&o.trim, "trim", time.Second, "left out at each end of a run's arrivals")
	flag.DurationVar(&o.lead, "lead", time.Second, "time given to the workers to start before they call")
	flag.IntVar(&o.rounds, "rounds", 1, "run every approach this many times, taking turns, and pool the runs")
	flag.StringVar(&o.plot, "plot", "", "write a PNG of calls per 100 ms over time to this file")
	flag.StringVar(&o.profile, "profile", "", "write each worker's CPU profile of the steady window into this directory")
	flag.StringVar(&approaches, "approaches", "sluice,local,redis_rate,redis_rate_default,floor",
		"which approaches to run, comma separated")
	flag.Parse()
	if flag.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if quotas == "" {
		quotas = strconv.FormatInt(rateFlag, 10)
	}
	for _, s := range strings.Split(quotas, ",") {
		q, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || q < 1 || q > 1_000_000 {
			return o, fmt.Errorf("bad quota %q: want an integer from 1 to 1000000", s)
		}
		o.quotas = append(o.quotas, q)
	}
	switch {
	case o.procs < 1 || o.goroutines < 1:
		return o, errors.New("-procs and -goroutines must be at least 1")
	case o.procs > 64 || o.procs*o.goroutines > 10_000:
		return o, errors.New("at most 64 processes and 10000 goroutines in all")
	case o.trim < 0 || o.duration <= 2*o.trim:
		return o, fmt.Errorf("-duration %v leaves no steady state after trimming %v at each end", o.duration, o.trim)
	case o.duration > 10*time.Minute:
		return o, errors.New("-duration is capped at 10m")
	case o.rounds < 1 || o.rounds > 20:
		return o, errors.New("-rounds must be from 1 to 20")
	case o.lead < 100*time.Millisecond || o.lead > time.Minute:
		return o, errors.New("-lead must be from 100ms to 1m")
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return o, err
		}
		abs, err := filepath.Abs(o.profile)
		if err != nil {
			return o, err
		}
		o.profile = abs
	}
	o.approaches = map[string]bool{}
	var ids []string
	for _, a := range approachList(o) {
		ids = append(ids, a.id)
	}
	for _, s := range strings.Split(approaches, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(","+strings.Join(ids, ",")+",", ","+s+",") {
			return o, fmt.Errorf("unknown approach %q (%s)", s, strings.Join(ids, ", "))
		}
		o.approaches[s] = true
	}
	return o, nil
}

// approachList is every approach, in the order they run.
func approachList(o options) []approach {
	return []approach{
		{id: "sluice", label: "sluice throttle.Wait", kind: kindSluice, procs: o.procs, goroutines: o.goroutines},
		{id: "local", label: "rate.Limiter per process", kind: kindLocal, procs: o.procs, goroutines: o.goroutines},
		{id: "redis_rate", label: "redis_rate, burst 5", kind: kindRedisRate, procs: o.procs, goroutines: o.goroutines, burst: 5},
		{id: "redis_rate_default", label: "redis_rate, burst = quota", kind: kindRedisRate, procs: o.procs, goroutines: o.goroutines, burst: -1},
		{id: "floor", label: "floor: 1 process, 1 rate.Limiter", kind: kindFloor, procs: 1, goroutines: o.procs * o.goroutines},
	}
}

// run runs the benchmark and prints its report; it returns the rows, one
// slice per quota.
func run(ctx context.Context, o options) ([][]*row, error) {
	srv, stopRedis, err := redistest.Launch(redistest.Config{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := stopRedis(); err != nil {
			fmt.Fprintln(os.Stderr, "pace:", err)
		}
	}()
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	version := "?"
	if s, err := redisinfo.Read(ctx, rdb); err == nil {
		version = s.Version
	}
	rounds := ""
	if o.rounds > 1 {
		rounds = fmt.Sprintf(", %d rounds taking turns, pooled", o.rounds)
	}
	fmt.Fprintf(out, "# Pacing benchmark\n\n%d worker processes × %d goroutines, runs of %v%s, first and last %v of each run's arrivals left out; "+
		"%d CPUs, %s/%s, %s, redis-server %s on loopback; load average at the start %s.\n",
		o.procs, o.goroutines, o.duration, rounds, o.trim, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), version, loadAvg())

	var chosen []approach
	for _, a := range approachList(o) {
		if o.approaches[a.id] {
			chosen = append(chosen, a)
		}
	}
	var all [][]*row
	for _, q := range o.quotas {
		rows := make([]*row, len(chosen))
		for i, a := range chosen {
			if a.burst < 0 {
				a.burst = int(q)
			}
			rows[i] = &row{a: a, quota: q}
		}
		for k := range o.rounds {
			for j := range rows {
				r := rows[(j+k)%len(rows)] // each round starts with another approach
				fmt.Fprintf(os.Stderr, "pace: %d/s, round %d/%d: %s ...\n", q, k+1, o.rounds, r.a.label)
				s, err := runOnce(ctx, o, srv.Addr(), rdb, r.a, q)
				if err != nil {
					return nil, fmt.Errorf("%s at %d/s: %w", r.a.label, q, err)
				}
				s.round = k
				r.segs = append(r.segs, s)
			}
		}
		for _, r := range rows {
			r.pool()
		}
		all = append(all, rows)
		printQuota(o, q, rows)
	}
	if o.plot != "" {
		if err := writePlot(o.plot, all, o.duration); err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(out, "\nPlot of calls per 100 ms: %s\n", o.plot)
	}
	return all, nil
}

// runOnce runs approach a at quota q once, against a fresh downstream and
// a flushed Redis.
func runOnce(ctx context.Context, o options, addr string, rdb *redis.Client, a approach, q int64) (*segment, error) {
	tolerance := max(2, int(math.Ceil(float64(q)/100)))
	fake := downstreamtest.NewServer(downstreamtest.Config{Rate: int(q), Tolerance: tolerance})
	defer fake.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	start := time.Now().Add(o.lead)
	end := start.Add(o.duration)
	prefix := fmt.Sprintf("pace:%s:%d:%d", a.id, q, start.UnixNano())

	// INFO at both ends of the steady span.
	var samples [2]redisinfo.Snapshot
	var sampleErr error
	var sampling sync.WaitGroup
	var parentStalls, redisStalls stalls
	var parentCPU time.Duration
	sampling.Go(func() {
		if sleepUntil(ctx, start.Add(o.trim)) {
			cpu := sysstat.ProcessCPU()
			parentStalls = probeSleep(end.Add(-o.trim))
			parentCPU = sysstat.ProcessCPU() - cpu
		}
	})
	sampling.Go(func() {
		if sleepUntil(ctx, start.Add(o.trim)) {
			redisStalls = probeRedis(ctx, rdb, end.Add(-o.trim))
		}
	})
	sampling.Go(func() {
		for i, at := range []time.Time{start.Add(o.trim), end.Add(-o.trim)} {
			if !sleepUntil(ctx, at) {
				sampleErr = ctx.Err()
				return
			}
			s, err := redisinfo.Read(ctx, rdb)
			if err != nil {
				sampleErr = err
				return
			}
			samples[i] = s
		}
	})

	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Workers stop by themselves at the end; this only bounds a stuck one.
	wctx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second))
	defer cancel()
	results := make([]workerResult, a.procs)
	errs := make([]error, a.procs)
	var wg sync.WaitGroup
	for p := range a.procs {
		cfg := workerConfig{
			Proc: p, Kind: a.kind, URL: fake.URL(), Quota: q, Burst: a.burst, Goroutines: a.goroutines,
			Prefix: prefix, Start: start, Duration: o.duration, Trim: o.trim,
		}
		if a.kind == kindSluice || a.kind == kindRedisRate {
			cfg.Redis = addr
		}
		if o.profile != "" {
			cfg.Profile = filepath.Join(o.profile, fmt.Sprintf("%s-%d-%d-p%d.pprof", a.id, q, start.Unix(), p))
		}
		arg, err := json.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(wctx, exe, workerArg, string(arg))
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr
		cmd.WaitDelay = 2 * time.Second
		if err := redistest.StartProcess(cmd); err != nil { // dies with the benchmark on Linux
			cancel()
			wg.Wait()
			return nil, err
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				errs[p] = fmt.Errorf("worker %d: %w", p, err)
				return
			}
			if err := json.Unmarshal(out.Bytes(), &results[p]); err != nil {
				errs[p] = fmt.Errorf("worker %d: %w: %v", p, errNoResult, err)
			}
		})
	}
	wg.Wait()
	sampling.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if sampleErr != nil {
		return nil, fmt.Errorf("INFO: %w", sampleErr)
	}
	// Let answers in flight finish before reading the counts.
	time.Sleep(100 * time.Millisecond)

	s := &segment{start: start, workers: results, arrivals: fake.Arrivals(), load: loadAvgValue(),
		parent: parentStalls, redis: redisStalls, parentCPU: parentCPU}
	counts := fake.Counts()
	s.allCalls, s.allLimited = counts.Total, counts.Limited
	s.measure(o, q, tolerance, samples)
	return s, nil
}

// measure computes a run's figures from its arrivals and samples.
func (s *segment) measure(o options, q int64, tolerance int, samples [2]redisinfo.Snapshot) {
	arr := s.arrivals
	s.refused = benchstat.Refused(arr, int(q), tolerance)
	if n := benchstat.CountTrue(s.refused, 0, len(s.refused)); n != s.allLimited || len(arr) != s.allCalls {
		s.notes = append(s.notes, fmt.Sprintf("a replay of the server's rule finds %d refused of %d arrivals, the server counted %d of %d",
			n, len(arr), s.allLimited, s.allCalls))
	}
	s.window, s.steady = benchstat.Steady(arr, o.trim)
	if !s.steady {
		s.notes = append(s.notes, fmt.Sprintf("only %d arrivals: no steady window", len(arr)))
	}
	// Commands per call over the steady span: the workers' own count
	// between two instants, and the server's between the INFO samples.
	for _, w := range s.workers {
		s.sentCmds += w.CmdsAtHi - w.CmdsAtLo
	}
	s.sentCalls = benchstat.Count(arr, s.start.Add(o.trim), s.start.Add(o.duration-o.trim))
	s.server = delta(samples[0], samples[1])
	s.srvCalls = benchstat.Count(arr, s.server.from, s.server.to)
	for _, w := range s.workers {
		if w.LateStart > 0 {
			s.notes = append(s.notes, fmt.Sprintf("worker %d was ready %v after the start", w.Proc, w.LateStart))
		}
		if w.HTTPErrors+w.WaitErrors+w.OtherStatus > 0 {
			s.notes = append(s.notes, fmt.Sprintf("worker %d: %d HTTP errors, %d wait errors, %d other statuses; first: %s",
				w.Proc, w.HTTPErrors, w.WaitErrors, w.OtherStatus, w.FirstError))
		}
	}
}

// pool computes a row's figures over all its runs.
func (r *row) pool() {
	var gaps benchstat.Gaps
	var accepted int
	var sent, sentCalls, srvCmds, srvScripts, srvCalls int64
	for _, s := range r.segs {
		r.allCalls += s.allCalls
		r.allLimited += s.allLimited
		sent += s.sentCmds
		sentCalls += int64(s.sentCalls)
		srvCmds += s.server.commands
		srvScripts += s.server.scripts
		srvCalls += int64(s.srvCalls)
		if !s.steady {
			continue
		}
		r.steady = true
		in := s.arrivals[s.window.Lo:s.window.Hi]
		limited := benchstat.CountTrue(s.refused, s.window.Lo, s.window.Hi)
		r.secs += s.window.Len().Seconds()
		r.calls += len(in)
		r.limited += limited
		accepted += len(in) - limited
		r.max1s = max(r.max1s, downstreamtest.MaxInWindow(in, time.Second))
		r.max100 = max(r.max100, downstreamtest.MaxInWindow(in, 100*time.Millisecond))
		gaps.Add(in)
	}
	if r.secs > 0 {
		r.achieved = float64(accepted) / r.secs / float64(r.quota)
		r.sent = float64(r.calls) / r.secs / float64(r.quota)
	}
	r.cv = gaps.CV()
	if sentCalls > 0 {
		r.clientCmds = float64(sent) / float64(sentCalls)
	}
	if srvCalls > 0 {
		r.serverCmds = float64(srvCmds) / float64(srvCalls)
		r.scripts = float64(srvScripts) / float64(srvCalls)
	}
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// loadAvgValue is the 1-minute load average, NaN where unknown.
func loadAvgValue() float64 {
	avg, ok := sysstat.LoadAvg()
	if !ok {
		return math.NaN()
	}
	return avg[0]
}

func loadAvg() string {
	v := loadAvgValue()
	if math.IsNaN(v) {
		return "unknown"
	}
	return fmt.Sprintf("%.2f", v)
}
