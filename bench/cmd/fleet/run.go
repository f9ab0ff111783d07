package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/redisinfo"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Bounds on the steps of a run, so that it always ends by itself.
const (
	startLimit   = 30 * time.Second // a child's start-up line
	enqueueLimit = 5 * time.Minute  // enqueueing one case's jobs
	stopGrace    = 15 * time.Second // SIGTERM to exit, before a kill
	apiLife      = 5 * time.Minute  // an API process's life beyond its case's duration
)

// env is what the cases of one run share: the built binaries, the
// redis-server, the busy loops and the children still running.
type env struct {
	o            options
	dir          string
	self         string // this binary, for the API and the busy loops
	worker       string
	enqueue      string
	redisAddr    string
	redisVersion string
	rdb          *redis.Client
	kids         proc.Group
	closers      []func()
	// arrivals keeps each case's record per system, for the plot.
	arrivals map[string]map[string][]arrival
}

// newEnv builds the binaries, starts redis-server and the busy loops.
// On error nothing is left running.
func newEnv(ctx context.Context, o options) (e *env, err error) {
	e = &env{o: o, arrivals: map[string]map[string][]arrival{}}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "sluice-fleet-"); err != nil {
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

	srv, stopRedis, err := redistest.Launch(redistest.Config{})
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, func() { _ = stopRedis() })
	e.redisAddr = srv.Addr()
	// One connection: CONFIG RESETSTAT and the INFO after it must not be
	// joined by a new connection's handshake commands.
	e.rdb = redis.NewClient(&redis.Options{Addr: e.redisAddr, PoolSize: 1, ConnMaxIdleTime: -1})
	e.closers = append(e.closers, func() { e.rdb.Close() })
	snap, err := redisinfo.Read(ctx, e.rdb)
	if err != nil {
		return e, err
	}
	e.redisVersion = snap.Version

	if o.busy > 0 {
		var total time.Duration
		for _, c := range o.cases {
			total += 2*c.duration + time.Minute
		}
		b, err := proc.Start("busy loops", filepath.Join(e.dir, "busy.log"), e.self, busyArg, "-n", strconv.Itoa(o.busy), "-life", total.String())
		if err != nil {
			return e, err
		}
		e.kids.Add(b)
	}
	return e, nil
}

// close stops every child, redis-server, and removes the directory unless
// -keep; in reverse order of starting.
func (e *env) close() {
	e.kids.KillAll()
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func (e *env) logf(format string, args ...any) {
	if e.o.verbose {
		fmt.Fprintf(os.Stderr, "fleet: "+format+"\n", args...)
	}
}

// startAPI starts a fresh API process for case c and returns it with its
// URL.
func (e *env) startAPI(ctx context.Context, c fleetCase, system string) (*proc.Child, string, error) {
	cfg := c.api
	cfg.life = c.duration + apiLife
	return proc.StartServer(ctx, &e.kids, "the API", filepath.Join(e.dir, c.name+"-"+system+"-api.log"), startLimit, e.self, cfg.args()...)
}

// fetchArrivals reads the API's record and stops the API.
func (e *env) fetchArrivals(ctx context.Context, a *proc.Child, url string) ([]arrival, error) {
	defer func() { _ = a.Stop(stopGrace) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/arrivals", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the API's arrivals: %w", err)
	}
	defer resp.Body.Close()
	var in arrivalsJSON
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil {
		return nil, fmt.Errorf("reading the API's arrivals: %w", err)
	}
	if len(in.At) != len(in.OK) {
		return nil, fmt.Errorf("the API's arrivals: %d times, %d answers", len(in.At), len(in.OK))
	}
	out := make([]arrival, len(in.At))
	for i := range in.At {
		out[i] = arrival{At: time.Unix(0, in.At[i]), OK: in.OK[i]}
	}
	return out, nil
}

func (e *env) keepArrivals(c fleetCase, system string, arr []arrival) {
	if e.arrivals[c.name] == nil {
		e.arrivals[c.name] = map[string][]arrival{}
	}
	e.arrivals[c.name][system] = arr
}

// jobCount is how many jobs keep c's fleet busy for its whole duration:
// a quarter more than the quota lets through, and a hundred.
func jobCount(c fleetCase) int {
	return int(float64(c.api.rate)*c.duration.Seconds()*1.25) + 100
}

// policyYAML is the policy file of case c against the API at url.
func policyYAML(c fleetCase, url string, jobs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "queue:\n  name: fleet\n  bound: %d\ndownstreams:\n  api:\n    base_url: %s/api/\n    rate: %d\n    per: 1s\n",
		jobs+1000, url, c.api.rate)
	if c.concurrency > 0 {
		fmt.Fprintf(&b, "    concurrency: %d\n", c.concurrency)
	}
	return b.String()
}

// jobLine gives job n's JSON line: a GET of the API at url for tenant
// n mod tenants.
func jobLine(url string, tenants int) func(n int) string {
	return func(n int) string {
		return fmt.Sprintf(`{"tenant":"tenant-%d","type":"sluice.http","downstream":"api","payload":{"url":"%s/api/jobs/%d"}}`, n%tenants, url, n)
	}
}

// runSluice runs case c on sluice: the API, the jobs, the workers.
func (e *env) runSluice(ctx context.Context, c fleetCase) (*figures, error) {
	api, url, err := e.startAPI(ctx, c, "sluice")
	if err != nil {
		return nil, err
	}
	defer api.Kill()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	jobs := jobCount(c)
	policy := filepath.Join(e.dir, c.name+"-policy.yaml")
	if err := os.WriteFile(policy, []byte(policyYAML(c, url, jobs)), 0o600); err != nil {
		return nil, err
	}
	dir := filepath.Join(e.dir, c.name+"-jobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	files, err := proc.WriteJobs(dir, jobs, min(4, 1+jobs/5000), jobLine(url, e.o.tenants))
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	ectx, cancel := context.WithTimeout(ctx, enqueueLimit)
	err = proc.Enqueue(ectx, e.enqueue, []string{"-policy", policy, "-redis", "redis://" + e.redisAddr + "/0"}, files)
	cancel()
	if err != nil {
		return nil, err
	}
	e.logf("%s: enqueued %d jobs with %d enqueue processes in %v", c.name, jobs, len(files), time.Since(t0).Round(time.Millisecond))

	if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	before, err := redisinfo.Read(ctx, e.rdb)
	if err != nil {
		return nil, err
	}
	t0 = time.Now()
	workers := make([]*proc.Child, c.workers)
	for i := range workers {
		w, err := proc.Start(fmt.Sprintf("worker %d", i+1), filepath.Join(e.dir, fmt.Sprintf("%s-worker-%d.log", c.name, i+1)), e.worker,
			"-policy", policy, "-redis", "redis://"+e.redisAddr+"/0", "-listen", "127.0.0.1:0",
			"-concurrency", strconv.Itoa(c.conc), "-shutdown-timeout", "5s")
		if err != nil {
			return nil, err
		}
		e.kids.Add(w)
		defer w.Kill()
		workers[i] = w
	}
	for _, w := range workers {
		if _, err := w.WaitLine(ctx, "sluice worker started", startLimit); err != nil {
			return nil, err
		}
	}
	begin := time.Now()
	e.logf("%s: %d workers started in %v; running for %v", c.name, c.workers, begin.Sub(t0).Round(time.Millisecond), c.duration)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(c.duration):
	}
	end := time.Now()
	after, err := redisinfo.Read(ctx, e.rdb)
	if err != nil {
		return nil, err
	}
	var notes []string
	for _, w := range workers {
		if w.Exited() {
			notes = append(notes, fmt.Sprintf("%s exited during the run (%v); its log ends: %s", w.Name, w.Err(), w.LastLines()))
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
				notes = append(notes, fmt.Sprintf("%s after SIGTERM: %v; its log ends: %s", w.Name, err, w.LastLines()))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	e.logf("%s: workers stopped %v after the end", c.name, time.Since(end).Round(time.Millisecond))
	arr, err := e.fetchArrivals(ctx, api, url)
	if err != nil {
		return nil, err
	}
	e.keepArrivals(c, "sluice", arr)
	f := measure("sluice", arr, begin, end, float64(c.api.rate))
	d := after.Sub(before)
	f.redis = &d
	if e.o.verbose {
		for name, st := range d.Commands {
			e.logf("%s: redis %s: %d calls", c.name, name, st.Calls)
		}
	}
	f.notes = notes
	return &f, nil
}

// runFloor runs case c's floor: one rate.Limiter at the quota, burst 1,
// shared by workers × conc goroutines of this process that call a fresh
// API and ignore its Retry-After. With a concurrency cap in the case, at
// most that many calls are in flight, as the policy asks of sluice.
func (e *env) runFloor(ctx context.Context, c fleetCase) (*figures, error) {
	api, url, err := e.startAPI(ctx, c, "floor")
	if err != nil {
		return nil, err
	}
	defer api.Kill()
	goroutines := c.workers * c.conc
	tr := &http.Transport{MaxIdleConns: goroutines, MaxIdleConnsPerHost: goroutines}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	lim := rate.NewLimiter(rate.Limit(c.api.rate), 1)
	var slots chan struct{}
	if c.concurrency > 0 {
		slots = make(chan struct{}, c.concurrency)
	}
	begin := time.Now()
	end := begin.Add(c.duration)
	rctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var callErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for n := 0; ; n++ {
				if lim.Wait(rctx) != nil {
					return
				}
				if slots != nil {
					slots <- struct{}{}
				}
				err := get(rctx, client, fmt.Sprintf("%s/api/floor/%d/%d", url, g, n))
				if slots != nil {
					<-slots
				}
				if err != nil && rctx.Err() == nil {
					mu.Lock()
					callErr = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	arr, err := e.fetchArrivals(ctx, api, url)
	if err != nil {
		return nil, err
	}
	e.keepArrivals(c, "floor", arr)
	f := measure("floor", arr, begin, end, float64(c.api.rate))
	if callErr != nil {
		f.notes = append(f.notes, fmt.Sprintf("a goroutine stopped on an error: %v", callErr))
	}
	return &f, nil
}

// get makes one GET and reads the answer, whatever its status.
func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}
