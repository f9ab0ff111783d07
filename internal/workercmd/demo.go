package workercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/queue/policy"
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
	client, closeRedis, embedded, err := connect(ctx, o.redis, true, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	defer closeRedis()
	if err := checkRedis(ctx, client, o.allowEvicting, embedded, slog.New(slog.NewTextHandler(stderr, nil))); err != nil {
		fmt.Fprintln(stderr, "sluice demo:", err)
		return 1
	}
	quota := o.demoRate
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
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var workers []*worker
	for i := 0; i < 2; i++ {
		wo := o
		wo.listen = "127.0.0.1:0"
		wo.concurrency = 8
		w, err := newWorker(client, cfg, wo, log, prometheus.NewRegistry())
		if err != nil {
			fmt.Fprintln(stderr, "sluice demo:", err)
			return 1
		}
		workers = append(workers, w)
	}
	fmt.Fprintf(stdout, "sluice demo: a fake API at %s allows %d calls/s and answers 429 above that.\n", fake.URL(), quota)
	fmt.Fprintf(stdout, "Four tenants enqueue %d jobs/s between them; two workers (8 goroutines each) drain them through one shared throttle.\n", 3*quota)
	fmt.Fprintf(stdout, "Tenant small-shop is admitted at 10 jobs/s (fixed window); the others have no admission limit.\n\n")
	runCtx, stopWorkers := context.WithCancel(context.Background())
	done := make(chan struct{}, len(workers))
	for _, w := range workers {
		go func() { w.run(runCtx); done <- struct{}{} }()
	}
	var admitted, refused atomic.Int64
	producers := map[string]int64{"acme": quota, "globex": quota, "initech": quota / 2, "small-shop": quota / 2}
	for tenant, rate := range producers {
		go produce(ctx, workers[0].producer, tenant, rate, base.String(), &admitted, &refused)
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
		case <-tick.C:
		}
		c := fake.Counts()
		if time.Since(start) <= demoSettle+500*time.Millisecond {
			settled = c.Limited
		}
		st, _ := workers[0].producer.Stats(context.Background())
		fmt.Fprintf(stdout, "%4.0fs  %4d / %4d  %6d  %11d  %9d  %14d\n",
			time.Since(start).Seconds(), c.Total-last, quota, c.Limited, st.Depth, admitted.Load(), refused.Load())
		last = c.Total
	}
	stopWorkers()
	for range workers {
		<-done
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
