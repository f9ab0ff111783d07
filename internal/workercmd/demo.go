package workercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/queue/worker"
	"github.com/sluicehq/sluice/throttle"
)

// runDemo shows the whole system on one machine: an embedded Redis (unless
// -redis is given), a fake downstream that enforces a quota and answers 429
// above it, producers for four tenants enqueueing faster than the quota,
// and two workers draining through the shared throttle. Every second it
// prints the downstream's calls against its quota and the 429s. It exits
// 0 when the API refused no call after the first demoSettle (a fleet
// paced at exactly the quota may draw one refusal while it learns the
// API's real limit), and otherwise says why it exits 1.
func runDemo(ctx context.Context, o options, stdout, stderr io.Writer) int {
	fmt.Fprintln(stdout, "sluice demo: starting (an embedded Redis unless -redis is given, a fake API, two workers)...")
	if o.demoFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.demoFor)
		defer cancel()
	}
	client, closeRedis, err := demoRedis(o.worker, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	defer closeRedis()
	quota := o.demoQuota
	fake := downstreamtest.NewServer(downstreamtest.Config{Rate: int(quota)})
	defer fake.Close()
	base, _ := url.Parse(fake.URL() + "/api/")
	lim := throttle.Limit{Name: "demo-api", Rate: quota, Per: time.Second, MaxWait: 2 * time.Second}
	fixed := algorithms.Policy{Algorithm: algorithms.FixedWindow, Limit: 10, Period: time.Second}
	cfg := &policy.Config{
		Queue:       policy.Queue{Name: "demo", Bound: 2000, TenantBound: 500, Prefetch: 16, MaxPayload: 64 << 10},
		Downstreams: map[string]queue.Downstream{"demo-api": {Name: "demo-api", BaseURL: base, Limit: lim, Timeout: 5 * time.Second}},
		Tenants: map[string]policy.Tenant{
			"small-shop": {ID: "small-shop", Policy: &fixed, Weight: 1},
		},
	}
	// The first worker serves the page where -listen says (a free port if
	// that one is taken), so that the demo's page can be watched live; the
	// second on a port of its own.
	page, err := net.Listen("tcp", o.worker.Listen)
	if err != nil {
		page, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	var workers []*worker.Worker
	for i := range 2 {
		wc := *o.worker
		wc.Policy, wc.PolicyFile = cfg, ""
		wc.Redis, wc.RedisURL, wc.RedisCluster, wc.RedisCAFile = client, "", "", ""
		wc.Listen, wc.Listener, wc.Concurrency = "127.0.0.1:0", nil, 8
		if i == 0 {
			wc.Listen, wc.Listener = "", page
		}
		wc.Logger = slog.New(slog.DiscardHandler)
		w, err := worker.New(&wc)
		if err != nil {
			fmt.Fprintln(stderr, "sluice demo:", err)
			return 1
		}
		workers = append(workers, w)
	}
	qc := cfg.QueueConfig()
	qc.AllowEviction = o.worker.AllowEvictingRedis
	producer, err := queue.NewProducer(client, &qc)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	fmt.Fprintf(stdout, "sluice demo: a fake API at %s allows %d calls/s and answers 429 above that.\n", fake.URL(), quota)
	fmt.Fprintf(stdout, "Four tenants enqueue %d jobs/s between them; two workers (8 goroutines each) drain them through one shared throttle.\n", 3*quota)
	fmt.Fprintf(stdout, "Tenant small-shop is admitted at 10 jobs/s (fixed window); the others have no admission limit.\n")
	fmt.Fprintf(stdout, "The sluice page, live: http://%s/ (metrics at /metrics).\n\n", page.Addr())
	runCtx, stopWorkers := context.WithCancel(context.Background())
	done := make(chan error, len(workers))
	for _, w := range workers {
		go func() { done <- w.Run(runCtx) }()
	}
	stopped := 0 // workers that returned
	failed := false
	var admitted, refused atomic.Int64
	producers := map[string]int64{"acme": quota, "globex": quota, "initech": quota / 2, "small-shop": quota / 2}
	for tenant, rate := range producers {
		go produce(ctx, producer, tenant, rate, base.String(), &admitted, &refused)
	}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, settled := 0, 0
	fmt.Fprintf(stdout, "%5s  %12s  %6s  %11s  %9s  %14s\n", "time", "calls/s", "429s", "queue depth", "admitted", "refused (rate)")
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-done: // a worker that could not start
			stopped++
			failed = true
			fmt.Fprintln(stderr, "sluice demo:", err)
			break loop
		case <-tick.C:
		}
		c := fake.Counts()
		if time.Since(start) <= demoSettle+500*time.Millisecond {
			settled = c.Limited
		}
		st, _ := producer.Stats(context.Background())
		fmt.Fprintf(stdout, "%4.0fs  %4d / %4d  %6d  %11d  %9d  %14d\n",
			time.Since(start).Seconds(), c.Total-last, quota, c.Limited, st.Depth, admitted.Load(), refused.Load())
		last = c.Total
	}
	stopWorkers()
	for ; stopped < len(workers); stopped++ {
		if err := <-done; err != nil && !failed {
			failed = true
			fmt.Fprintln(stderr, "sluice demo:", err)
		}
	}
	if failed {
		return 1
	}
	c := fake.Counts()
	elapsed := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "\n%d calls in %.0fs (%.1f/s against a quota of %d/s), %d refused by the API with 429.\n", c.Total, elapsed, float64(c.Total)/elapsed, quota, c.Limited)
	if time.Since(start) <= demoSettle {
		settled = c.Limited // a run shorter than demoSettle counts none
	}
	if late := c.Limited - settled; late > 0 {
		fmt.Fprintf(stderr, "sluice demo: FAILED: the API refused %d calls after the first %v; the fleet should have learned its limit by then.\n", late, demoSettle)
		return 1
	}
	if c.Total == 0 {
		fmt.Fprintln(stderr, "sluice demo: FAILED: no call reached the API.")
		return 1
	}
	return 0
}

// demoRedis returns the Redis the -redis flags name, or else starts an
// embedded one and says so.
func demoRedis(c *worker.Config, stdout io.Writer) (client redis.UniversalClient, closer func(), err error) {
	if c.RedisURL != worker.EmbeddedRedis && (c.RedisURL != "" || c.RedisCluster != "" || c.RedisCAFile != "") {
		client, err := redisconn.Flags{URL: c.RedisURL, Cluster: c.RedisCluster, CAFile: c.RedisCAFile}.Client()
		if err != nil {
			return nil, nil, err
		}
		return client, func() { client.Close() }, nil
	}
	e, stop, err := redisconn.StartEmbedded()
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(stdout, redisconn.EmbeddedWarning(e.Options().Addr))
	return e, stop, nil
}

// demoSettle is how long the demo gives the fleet to learn the API's
// limit before a 429 counts as a failure.
const demoSettle = 5 * time.Second

// produce enqueues HTTP jobs for tenant at about rate per second.
func produce(ctx context.Context, p *queue.Producer, tenant string, rate int64, base string, admitted, refused *atomic.Int64) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		payload := fmt.Sprintf(`{"method":"POST","url":%q,"body":"order %d"}`, base+"orders", n)
		_, err := p.Enqueue(ctx, queue.Job{Tenant: tenant, Type: httpjob.Type, Downstream: "demo-api", Payload: []byte(payload)})
		var rl *queue.RateLimitedError
		if err == nil {
			admitted.Add(1)
		} else if errors.As(err, &rl) {
			refused.Add(1)
		}
	}
}
