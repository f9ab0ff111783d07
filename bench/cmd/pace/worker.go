package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	benchstat "github.com/sluicehq/sluice/bench/internal/pacestat"
	"github.com/sluicehq/sluice/bench/internal/sysstat"
	"github.com/sluicehq/sluice/throttle"
)

// workerArg is the hidden first argument that turns the binary into one
// worker process of an approach.
const workerArg = "__pace_worker"

// The ways of pacing that the benchmark compares.
const (
	kindSluice    = "sluice"     // throttle.Wait on the shared Redis bucket
	kindLocal     = "local"      // each process its own rate.Limiter at the full quota
	kindRedisRate = "redis_rate" // redis_rate.Allow, sleeping RetryAfter when refused
	kindFloor     = "floor"      // one process, one rate.Limiter shared by every goroutine
)

// workerConfig is what the parent passes to a worker process.
type workerConfig struct {
	Proc       int
	Kind       string
	Redis      string // host:port; empty when the kind needs no Redis
	URL        string // the downstream's base URL
	Quota      int64  // calls per second
	Burst      int    // redis_rate's burst
	Goroutines int
	Prefix     string    // throttle key prefix, fresh per approach
	Start      time.Time // when every worker starts calling
	Duration   time.Duration
	Trim       time.Duration // the steady window is [Start+Trim, Start+Duration-Trim)
	Profile    string        // write a CPU profile of the steady window to this file
}

// workerResult is what a worker prints on its standard output.
type workerResult struct {
	Proc                    int
	Calls, OK, Limited      int
	OtherStatus, HTTPErrors int
	WaitErrors              int
	FirstError              string `json:",omitempty"`
	LateStart               time.Duration
	CmdsAtLo, CmdsAtHi      int64           // Redis commands this process had sent at the steady window's ends
	WaitOver                []time.Duration `json:",omitempty"` // sluice: time in Wait beyond the delay the server returned
	CallLatency             []time.Duration // a sample of HTTP round trips
	// How late this process woke from 10 ms sleeps in the steady window.
	Stalls stalls
	// CPU time this process used in the steady window.
	CPU time.Duration
}

// commandCounter counts the commands a go-redis client sends, pipelines
// included: the client's side of "Redis commands per call".
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// recorder gathers one goroutine's counts; merged at the end.
type recorder struct {
	calls, ok, limited, other, httpErrs, waitErrs int
	firstErr                                      string
	waitOver, latency                             []time.Duration
}

func (r *recorder) fail(kind *int, err error) {
	*kind++
	if r.firstErr == "" {
		r.firstErr = err.Error()
	}
}

// runWorker is the body of a worker process: it parses its configuration,
// runs its goroutines until the end of the run, and prints its result.
func runWorker(arg string) error {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(arg), &cfg); err != nil {
		return fmt.Errorf("worker configuration: %w", err)
	}
	end := cfg.Start.Add(cfg.Duration)
	// Whatever happens, this process does not outlive its run by much.
	time.AfterFunc(time.Until(end)+20*time.Second, func() {
		fmt.Fprintf(os.Stderr, "pace worker %d: still running 20s after the end; exiting\n", cfg.Proc)
		os.Exit(3)
	})

	var rdb *redis.Client
	counter := &commandCounter{}
	if cfg.Kind == kindSluice || cfg.Kind == kindRedisRate {
		rdb = redis.NewClient(&redis.Options{Addr: cfg.Redis, PoolSize: cfg.Goroutines + 2, MinIdleConns: cfg.Goroutines})
		defer rdb.Close()
		// Open the pool's connections before the start, then count.
		var wg sync.WaitGroup
		for range cfg.Goroutines {
			wg.Go(func() { _ = rdb.Ping(context.Background()).Err() })
		}
		wg.Wait()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			return fmt.Errorf("redis %s: %w", cfg.Redis, err)
		}
		rdb.AddHook(counter)
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Goroutines * 2,
		MaxIdleConnsPerHost: cfg.Goroutines * 2,
		IdleConnTimeout:     time.Minute,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	url := cfg.URL + "/call"

	call := func(rec *recorder) {
		t := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			rec.fail(&rec.httpErrs, err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		rec.latency = append(rec.latency, time.Since(t))
		rec.calls++
		switch {
		case resp.StatusCode < 300:
			rec.ok++
		case resp.StatusCode == http.StatusTooManyRequests:
			rec.limited++
		default:
			rec.other++
		}
	}

	// pace is one goroutine's loop for the chosen kind: wait for a turn,
	// then call; until the end of the run.
	var pace func(ctx context.Context, rec *recorder)
	// waitFailed counts a failed wait and reports whether to go on. A
	// rate.Limiter refuses at once a wait that would end after the
	// deadline: near the end that is the end of the run, not an error.
	waitFailed := func(ctx context.Context, rec *recorder, err error) bool {
		if ctx.Err() != nil || time.Until(end) < time.Second {
			return false
		}
		rec.fail(&rec.waitErrs, err)
		sleepCtx(ctx, 10*time.Millisecond)
		return true
	}
	switch cfg.Kind {
	case kindSluice:
		th, err := throttle.New(rdb, &throttle.Options{Prefix: cfg.Prefix})
		if err != nil {
			return err
		}
		defer th.Close()
		lim := throttle.Limit{Name: "api", Rate: cfg.Quota, Per: time.Second, MaxWait: 10 * time.Second}
		pace = func(ctx context.Context, rec *recorder) {
			for ctx.Err() == nil {
				t := time.Now()
				r, err := th.Wait(ctx, "api", lim, 1)
				if err != nil {
					if !waitFailed(ctx, rec, err) {
						return
					}
					continue
				}
				rec.waitOver = append(rec.waitOver, time.Since(t)-r.Delay)
				call(rec)
			}
		}
	case kindLocal, kindFloor:
		lim := rate.NewLimiter(rate.Limit(cfg.Quota), 1)
		pace = func(ctx context.Context, rec *recorder) {
			for ctx.Err() == nil {
				if err := lim.Wait(ctx); err != nil {
					if !waitFailed(ctx, rec, err) {
						return
					}
					continue
				}
				call(rec)
			}
		}
	case kindRedisRate:
		lim := redis_rate.NewLimiter(rdb)
		limit := redis_rate.Limit{Rate: int(cfg.Quota), Period: time.Second, Burst: cfg.Burst}
		pace = func(ctx context.Context, rec *recorder) {
			for ctx.Err() == nil {
				res, err := lim.Allow(ctx, cfg.Prefix+"api", limit)
				if err != nil {
					if !waitFailed(ctx, rec, err) {
						return
					}
					continue
				}
				if res.Allowed == 0 {
					sleepCtx(ctx, res.RetryAfter)
					continue
				}
				call(rec)
			}
		}
	default:
		return fmt.Errorf("unknown approach kind %q", cfg.Kind)
	}

	res := workerResult{Proc: cfg.Proc}
	if late := time.Since(cfg.Start); late > 0 {
		res.LateStart = late
	}
	time.Sleep(time.Until(cfg.Start))

	// The client's command count at both ends of the steady window.
	var snaps sync.WaitGroup
	snaps.Go(func() {
		time.Sleep(time.Until(cfg.Start.Add(cfg.Trim)))
		res.CmdsAtLo = counter.n.Load()
		cpu := sysstat.ProcessCPU()
		time.Sleep(time.Until(end.Add(-cfg.Trim)))
		res.CmdsAtHi = counter.n.Load()
		res.CPU = sysstat.ProcessCPU() - cpu
	})
	snaps.Go(func() {
		time.Sleep(time.Until(cfg.Start.Add(cfg.Trim)))
		res.Stalls = probeSleep(end.Add(-cfg.Trim))
	})

	if cfg.Profile != "" {
		stopProfile, err := startProfile(cfg.Profile, cfg.Start.Add(cfg.Trim), end.Add(-cfg.Trim))
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	recs := make([]recorder, cfg.Goroutines)
	var wg sync.WaitGroup
	for i := range recs {
		wg.Go(func() { pace(ctx, &recs[i]) })
	}
	wg.Wait()
	snaps.Wait()

	for i := range recs {
		r := &recs[i]
		res.Calls += r.calls
		res.OK += r.ok
		res.Limited += r.limited
		res.OtherStatus += r.other
		res.HTTPErrors += r.httpErrs
		res.WaitErrors += r.waitErrs
		if res.FirstError == "" {
			res.FirstError = r.firstErr
		}
		res.WaitOver = append(res.WaitOver, r.waitOver...)
		res.CallLatency = append(res.CallLatency, r.latency...)
	}
	res.WaitOver = thin(res.WaitOver, 5000)
	res.CallLatency = thin(res.CallLatency, 5000)
	return json.NewEncoder(os.Stdout).Encode(res)
}

// startProfile profiles this process's CPU from from to to, into path.
// The returned function waits for the profile to be written.
func startProfile(path string, from, to time.Time) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer f.Close()
		time.Sleep(time.Until(from))
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "pace worker: profile:", err)
			return
		}
		time.Sleep(time.Until(to))
		pprof.StopCPUProfile()
	}()
	return func() { <-done }, nil
}

// thin keeps at most n values, evenly picked, so that results stay small.
func thin(d []time.Duration, n int) []time.Duration {
	if len(d) <= n {
		return d
	}
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d[i*len(d)/n]
	}
	return out
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// quantiles summarises durations as p50 / p99 / max.
func quantiles(d []time.Duration) string {
	if len(d) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s / %s", short(benchstat.Quantile(d, 0.5)), short(benchstat.Quantile(d, 0.99)), short(benchstat.Quantile(d, 1)))
}

// short prints a duration with three significant digits.
func short(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + short(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

var errNoResult = errors.New("worker printed no result")
