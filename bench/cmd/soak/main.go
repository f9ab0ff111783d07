// Command soak runs the sluice worker at a steady rate for a long time and
// checks that it does not grow: its goroutines, its Go heap, its resident
// memory and Redis's memory stay flat once warm, and every accepted job
// reaches the downstream.
//
// It starts a redis-server on a free loopback port (persistence off), a
// downstreamtest.Server that enforces a quota and answers 429 above it,
// and the real worker binary (built from ../cmd/worker unless -worker is
// given) as a child process with a policy file for one downstream. A
// producer posts jobs to the worker's POST /enqueue at -rate per second
// over -tenants tenants, each job a sluice.http call to the downstream.
// Every -every it samples the worker's /metrics (go_goroutines,
// go_memstats_heap_inuse_bytes, process_resident_memory_bytes) and Redis
// (INFO memory, DBSIZE) and prints a row. At the end it stops producing,
// waits for the queue to drain, stops the worker with SIGTERM, and prints
// a verdict that compares the first and the last quarter of the samples
// taken after -warmup; it exits 1 when a check fails.
//
//	go run ./cmd/soak                       # 2 minutes
//	go run ./cmd/soak -duration 10m         # the long form
//
// Everything listens on 127.0.0.1 and stops by itself.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

type options struct {
	duration time.Duration
	warmup   time.Duration
	every    time.Duration
	rate     int
	quota    int
	tenants  int
	workers  int
	worker   string
	addr     string
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "how long to produce jobs")
	flag.DurationVar(&o.warmup, "warmup", 0, "samples before this are not judged (default: a fifth of -duration, at least 20s)")
	flag.DurationVar(&o.every, "every", 5*time.Second, "sampling interval")
	flag.IntVar(&o.rate, "rate", 100, "jobs enqueued per second")
	flag.IntVar(&o.quota, "quota", 150, "the downstream's quota and the throttle's rate, calls per second")
	flag.IntVar(&o.tenants, "tenants", 50, "tenants the jobs are spread over")
	flag.IntVar(&o.workers, "concurrency", 16, "the worker's -concurrency")
	flag.StringVar(&o.worker, "worker", "", "a built cmd/worker binary (default: go build it)")
	flag.StringVar(&o.addr, "addr", "", "a disposable Redis (host:port) to use instead of starting one; it is flushed")
	flag.Parse()
	if o.warmup == 0 {
		o.warmup = max(o.duration/5, 20*time.Second)
	}
	if o.rate <= 0 || o.quota <= 0 || o.tenants <= 0 || o.every <= 0 || o.duration <= o.warmup {
		fmt.Fprintln(os.Stderr, "soak: -rate, -quota, -tenants and -every must be positive and -duration longer than -warmup")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// sample is one reading of the worker and Redis.
type sample struct {
	at         time.Duration // since production started
	goroutines float64
	heap       float64 // bytes in in-use heap spans
	rss        float64
	redisMem   float64 // used_memory
	keys       int64
	retained   int64 // completed tasks asynq keeps (queue.retention)
	accepted   int64
	delivered  int // 2xx answers of the downstream
	limited    int // 429s of the downstream
	depth      int64
}

func run(ctx context.Context, o options, out io.Writer) (bool, error) {
	tmp, err := os.MkdirTemp("", "sluice-soak-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)

	bin := o.worker
	if bin == "" {
		if bin, _, err = proc.BuildSluice(ctx, tmp); err != nil {
			return false, err
		}
	}

	addr := o.addr
	if addr == "" {
		srv, stopRedis, err := redistest.Launch(redistest.Config{})
		if err != nil {
			return false, err
		}
		defer stopRedis()
		addr = srv.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return false, fmt.Errorf("flushing %s: %w", addr, err)
	}

	// The quota is enforced as a GCRA with a tolerance of 5% of a
	// second's calls: the soak is about growth, and on a shared 2-core
	// machine scheduler stalls alone bunch calls by tens of milliseconds
	// (cmd/pace measures the pacing itself against that floor).
	fake := downstreamtest.NewServer(downstreamtest.Config{Rate: o.quota, Tolerance: max(2, o.quota/20)})
	defer fake.Close()

	listen, err := freeAddr()
	if err != nil {
		return false, err
	}
	policy := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policy, fmt.Appendf(nil, `queue:
  name: soak
  bound: 100000
  prefetch: 32
  retention: 10m
downstreams:
  api:
    base_url: %s/api/
    rate: %d
    max_wait: 2s
    timeout: 10s
`, fake.URL(), o.quota), 0o600); err != nil {
		return false, err
	}
	w, err := proc.Start("the worker", filepath.Join(tmp, "worker.log"), bin, "-redis", "redis://"+addr+"/0", "-policy", policy, "-listen", listen,
		"-concurrency", strconv.Itoa(o.workers), "-shutdown-timeout", "20s")
	if err != nil {
		return false, err
	}
	defer w.Kill() // also on Ctrl-C
	if _, err := w.WaitLine(ctx, "sluice worker started", 30*time.Second); err != nil {
		return false, err
	}

	fmt.Fprintf(out, "# sluice soak\n\n%s, %d CPUs, %s/%s. Worker %s (-concurrency %d), redis-server on %s (persistence off).\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, filepath.Base(bin), o.workers, addr)
	fmt.Fprintf(out, "%d jobs/s over %d tenants for %v, downstream quota %d/s; samples every %v, judged after %v.\n\n",
		o.rate, o.tenants, o.duration, o.quota, o.every, o.warmup)
	base, err := measure(ctx, listen, rdb)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "Redis before the first job: %.2f MiB, %d keys.\n\n", base.redisMem/(1<<20), base.keys)
	fmt.Fprintln(out, "| t | goroutines | heap in use MiB | RSS MiB | Redis used MiB | Redis keys | completed tasks kept | accepted | delivered | 429s | backlog gauge |")
	fmt.Fprintln(out, "| --: | --: | --: | --: | --: | --: | --: | --: | --: | --: | --: |")

	var accepted, refused atomic.Int64
	var lastRefusal atomic.Value
	prodCtx, stopProd := context.WithTimeout(ctx, o.duration)
	defer stopProd()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		produce(prodCtx, o, listen, fake.URL(), &accepted, &refused, &lastRefusal)
	}()

	start := time.Now()
	var samples []sample
	take := func() error {
		s, err := measure(ctx, listen, rdb)
		if err != nil {
			return err
		}
		s.at = time.Since(start)
		s.accepted = accepted.Load()
		c := fake.Counts()
		s.delivered, s.limited = c.OK, c.Limited
		samples = append(samples, s)
		fmt.Fprintf(out, "| %s | %.0f | %.1f | %.1f | %.1f | %d | %d | %d | %d | %d | %d |\n",
			s.at.Round(time.Second), s.goroutines, s.heap/(1<<20), s.rss/(1<<20), s.redisMem/(1<<20), s.keys, s.retained,
			s.accepted, s.delivered, s.limited, s.depth)
		return nil
	}
	tick := time.NewTicker(o.every)
	defer tick.Stop()
sampling:
	for {
		select {
		case <-prodCtx.Done():
			break sampling
		case <-tick.C:
			if w.Exited() {
				return false, fmt.Errorf("the worker exited during the soak: %v\nworker log:\n%s", w.Err(), w.Tail())
			}
			if err := take(); err != nil {
				return false, err
			}
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}

	// Drain: every accepted job reaches the downstream.
	drainStart := time.Now()
	drainLimit := 60*time.Second + time.Duration(accepted.Load()/int64(o.quota))*time.Second/10
	for fake.Counts().OK < int(accepted.Load()) && time.Since(drainStart) < drainLimit {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	drained := time.Since(drainStart)
	if err := take(); err != nil {
		return false, err
	}

	// Graceful stop.
	exitErr := w.Stop(30 * time.Second)

	v := judge(o, base, samples)
	c := fake.Counts()
	v.check(c.OK == int(accepted.Load()), "every accepted job delivered once: %d accepted, %d answered 2xx (drained in %v after production stopped)",
		accepted.Load(), c.OK, drained.Round(time.Millisecond))
	// 429s are reported, not judged: on a shared machine a stall of the
	// worker longer than the fake's tolerance bunches calls whatever the
	// pacing does; cmd/pace measures pacing against the machine's floor.
	fmt.Fprintf(&v.text, "note the downstream refused %d of %d calls with 429 (%.2f%%; its tolerance is %d calls)\n",
		c.Limited, c.Total, 100*float64(c.Limited)/float64(max(c.Total, 1)), max(2, o.quota/20))
	sent := float64(accepted.Load()+refused.Load()) / o.duration.Seconds()
	v.check(refused.Load() == 0, "the endpoint refused %d of %d posts (%.1f/s offered)%s", refused.Load(), accepted.Load()+refused.Load(), sent, lastRefusalText(&lastRefusal))
	v.check(exitErr == nil, "the worker exited 0 after SIGTERM (got %v)", exitErr)
	fmt.Fprintf(out, "\n%s", v.text.String())
	if !v.ok {
		fmt.Fprintf(out, "\nworker log (tail):\n%s\n", w.Tail())
	}
	return v.ok, nil
}

func lastRefusalText(v *atomic.Value) string {
	if s, _ := v.Load().(string); s != "" {
		return "; last: " + s
	}
	return ""
}

// verdict collects the checks of a run.
type verdict struct {
	ok   bool
	text strings.Builder
}

func (v *verdict) check(ok bool, format string, args ...any) {
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		v.ok = false
	}
	fmt.Fprintf(&v.text, "%s %s\n", mark, fmt.Sprintf(format, args...))
}

// judge compares the first and last quarter of the samples taken after
// the warmup (the drain sample excluded). Goroutines may differ by a few
// (idle connections come and go); memory by a quarter plus a little,
// since the Go heap between collections depends on when a sample lands.
//
// Redis holds every job completed within queue.retention (10m here), so
// its memory grows until the soak is longer than that. Its checks are
// therefore on what is not retained tasks: the other keys, and the memory
// above the starting point per retained task.
func judge(o options, base sample, samples []sample) *verdict {
	v := &verdict{ok: true}
	var steady []sample
	for _, s := range samples[:len(samples)-1] {
		if s.at >= o.warmup {
			steady = append(steady, s)
		}
	}
	if len(steady) < 4 {
		v.check(false, "only %d samples after the warmup; run longer or sample more often", len(steady))
		return v
	}
	q := len(steady) / 4
	first, last := steady[:q], steady[len(steady)-q:]
	// quartile returns the lower quartile of f over ss. A leak raises
	// every sample, its lower quartile included; a spell of load from
	// other work on the machine (a backlog, busy goroutines) raises only
	// the samples it covers, so the lower quartile shows the first and
	// not the second.
	quartile := func(ss []sample, f func(sample) float64) float64 {
		xs := make([]float64, len(ss))
		for i, s := range ss {
			xs[i] = f(s)
		}
		slices.Sort(xs)
		return xs[len(xs)/4]
	}
	const mib = 1 << 20
	g0 := quartile(first, func(s sample) float64 { return s.goroutines })
	g1 := quartile(last, func(s sample) float64 { return s.goroutines })
	v.check(g1 <= g0+10, "goroutines: lower quartile %.0f in the first quarter, %.0f in the last (allowed +10)", g0, g1)
	for _, m := range []struct {
		name  string
		f     func(sample) float64
		slack float64
	}{
		{"Go heap in use", func(s sample) float64 { return s.heap }, 4 * mib},
		{"worker RSS", func(s sample) float64 { return s.rss }, 8 * mib},
	} {
		m0, m1 := quartile(first, m.f), quartile(last, m.f)
		v.check(m1 <= 1.25*m0+m.slack, "%s: lower quartile %.1f MiB in the first quarter, %.1f MiB in the last (allowed x1.25 + %.0f MiB)",
			m.name, m0/mib, m1/mib, m.slack/mib)
	}
	other := func(s sample) float64 { return float64(s.keys - s.retained) }
	k0, k1 := quartile(first, other), quartile(last, other)
	v.check(k1 <= k0+float64(o.tenants)+10, "Redis keys besides kept tasks: lower quartile %.0f in the first quarter, %.0f in the last (allowed + tenants + 10)", k0, k1)
	perTask := func(s sample) float64 { return (s.redisMem - base.redisMem) / float64(max(s.retained, 1)) }
	p0, p1 := quartile(first, perTask), quartile(last, perTask)
	v.check(p1 <= 1.25*p0+64, "Redis used_memory above the start per kept task: lower quartile %.0f B in the first quarter, %.0f B in the last (allowed x1.25 + 64 B)", p0, p1)
	span := steady[len(steady)-1].at - steady[0].at
	rate := float64(steady[len(steady)-1].delivered-steady[0].delivered) / span.Seconds()
	v.check(rate >= 0.95*float64(min(o.rate, o.quota)), "delivered %.1f jobs/s in the steady state (offered %d/s, quota %d/s)", rate, o.rate, o.quota)
	// A backlog may build up while the machine is busy with other work;
	// the drain check at the end says whether it was worked off.
	busy := 0
	for _, s := range steady {
		if s.depth > int64(o.rate) {
			busy++
		}
	}
	fmt.Fprintf(&v.text, "note %d of %d steady samples found more than a second's jobs waiting (a spell when the worker fell behind)\n", busy, len(steady))
	return v
}

// produce posts jobs at o.rate per second, spread over o.tenants, from a
// few goroutines so that one slow answer does not hold up the others.
func produce(ctx context.Context, o options, listen, api string, accepted, refused *atomic.Int64, last *atomic.Value) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	jobs := make(chan int, 64)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range jobs {
				status, reason := post(client, listen, api, n, o.tenants)
				if status == http.StatusAccepted {
					accepted.Add(1)
				} else {
					refused.Add(1)
					last.Store(fmt.Sprintf("%d %s", status, reason))
				}
			}
		}()
	}
	interval := time.Second / time.Duration(o.rate)
	next := time.Now()
	for n := 0; ; n++ {
		next = next.Add(interval)
		select {
		case <-ctx.Done():
			close(jobs)
			wg.Wait()
			return
		case <-time.After(time.Until(next)):
		}
		select {
		case jobs <- n:
		case <-ctx.Done():
		}
	}
}

func post(client *http.Client, listen, api string, n, tenants int) (int, string) {
	id := fmt.Sprintf("soak%09d", n)
	body, _ := json.Marshal(map[string]any{
		"id":         id,
		"tenant":     fmt.Sprintf("tenant-%03d", n%tenants),
		"type":       "sluice.http",
		"downstream": "api",
		"payload":    map[string]string{"method": "POST", "url": api + "/api/jobs/" + id, "body": id},
	})
	resp, err := client.Post("http://"+listen+"/enqueue", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(msg))
}

// measure reads the worker's runtime figures from /metrics and Redis's
// memory, key count and the queue's depth.
func measure(ctx context.Context, listen string, rdb *redis.Client) (sample, error) {
	var s sample
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		return s, fmt.Errorf("reading the worker's /metrics: %w", err)
	}
	defer resp.Body.Close()
	want := map[string]*float64{
		"go_goroutines":                 &s.goroutines,
		"go_memstats_heap_inuse_bytes":  &s.heap,
		"process_resident_memory_bytes": &s.rss,
	}
	var depth float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		if p := want[name]; p != nil {
			*p = f
		}
		if strings.HasPrefix(name, "sluice_queue_backlog") {
			depth += f // one series per tenant class
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	s.depth = int64(depth)
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return s, fmt.Errorf("INFO memory: %w", err)
	}
	if s.redisMem, err = strconv.ParseFloat(info["Memory"]["used_memory"], 64); err != nil {
		return s, fmt.Errorf("INFO memory: used_memory %q", info["Memory"]["used_memory"])
	}
	if s.keys, err = rdb.DBSize(ctx).Result(); err != nil {
		return s, err
	}
	if s.retained, err = rdb.ZCard(ctx, "asynq:{soak}:completed").Result(); err != nil {
		return s, err
	}
	return s, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
