package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/pacestat"
	"github.com/sluicehq/sluice/bench/internal/redisinfo"
	"github.com/sluicehq/sluice/bench/internal/sysstat"
)

// bench holds what every phase shares.
type bench struct {
	addr    string
	admin   *redis.Client // FLUSHALL and INFO; not counted
	o       options
	base    time.Time // the origin of every recorded time (monotonic)
	version string
}

func (b *bench) since() time.Duration { return time.Since(b.base) }

// client returns a new client on the server with c counting its commands.
func (b *bench) client(c *counter) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: b.addr, PoolSize: 64, MinIdleConns: 0})
	if c != nil {
		rc.AddHook(c)
	}
	return rc
}

func (b *bench) flush(ctx context.Context) error {
	return b.admin.FlushAll(ctx).Err()
}

// payload returns job i's payload: its index, then filler up to the
// configured size.
func (b *bench) payload(i int) []byte {
	p := make([]byte, max(b.o.payload, 8))
	binary.BigEndian.PutUint64(p, uint64(i))
	for k := 8; k < len(p); k++ {
		p[k] = 'x'
	}
	return p
}

// mark is the state of the server, a client and this process at a moment.
type mark struct {
	info   redisinfo.Snapshot
	counts counts
	usage  sysstat.Usage
	at     time.Time
}

func (b *bench) mark(ctx context.Context, c *counter) (mark, error) {
	m := mark{usage: sysstat.ProcessUsage(), at: time.Now()}
	if c != nil {
		m.counts = c.snapshot()
	}
	var err error
	m.info, err = redisinfo.Read(ctx, b.admin)
	return m, err
}

// cost is what a measured window cost.
type cost struct {
	server redisinfo.Snapshot // the difference of two snapshots
	client counts
	usage  sysstat.Usage // this process's
}

func (m mark) sub(a mark) cost {
	return cost{server: m.info.Sub(a.info), client: m.counts.sub(a.counts), usage: m.usage.Sub(a.usage)}
}

// perJob divides a cost by the jobs it bought.
func (c cost) perJob(jobs int) (roundTrips, commands, redisCPUus, clientCPUus float64) {
	if jobs == 0 {
		return 0, 0, 0, 0
	}
	n := float64(jobs)
	return float64(c.client.roundTrips) / n, float64(c.server.Processed) / n,
		c.server.CPU * 1e6 / n, float64((c.usage.User + c.usage.System).Microseconds()) / n
}

// produce enqueues jobs [from, to) from g goroutines, recording in enq the
// time each call was made. It stops at the first error.
func (b *bench) produce(ctx context.Context, sys system, from, to, g int, tenantOf func(int) string, enq []time.Duration, lat []time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				t0 := b.since()
				if enq != nil {
					enq[i] = t0
				}
				if err := sys.enqueue(ctx, i, tenantOf(i), b.payload(i)); err != nil {
					once.Do(func() { first = fmt.Errorf("%s: enqueue of job %d: %w", sys.name(), i, err); cancel() })
					return
				}
				if lat != nil {
					lat[i] = b.since() - t0
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// enqResult is one system's enqueue throughput.
type enqResult struct {
	sys      string
	jobs     int
	elapsed  time.Duration
	p50, p99 time.Duration
	cost     cost
}

func (r enqResult) rate() float64 { return float64(r.jobs) / r.elapsed.Seconds() }

// runEnqueue measures n enqueues from g producers on an empty server.
func (b *bench) runEnqueue(ctx context.Context, sys system, c *counter, n, g int, tenantOf func(int) string) (enqResult, error) {
	if err := b.flush(ctx); err != nil {
		return enqResult{}, err
	}
	lat := make([]time.Duration, n)
	m0, err := b.mark(ctx, c)
	if err != nil {
		return enqResult{}, err
	}
	if err := b.produce(ctx, sys, 0, n, g, tenantOf, nil, lat); err != nil {
		return enqResult{}, err
	}
	m1, err := b.mark(ctx, c)
	if err != nil {
		return enqResult{}, err
	}
	r := enqResult{sys: sys.name(), jobs: n, elapsed: m1.at.Sub(m0.at), cost: m1.sub(m0)}
	r.p50, r.p99 = pacestat.Quantile(lat, 0.50), pacestat.Quantile(lat, 0.99)
	return r, nil
}

// drainSpec is a drain: jobs pre-enqueued in groups (each group complete
// before the next starts), then the worker starts, while the arrivals are
// enqueued at a steady rate.
type drainSpec struct {
	n        int
	tenantOf func(int) string
	groups   [][2]int // [from, to) enqueued before the drain, in order
	arrive   [2]int   // [from, to) enqueued during the drain
	rate     float64  // arrivals per second
}

// drainResult is one system's drain.
type drainResult struct {
	sys        string
	n, done    int
	timedOut   bool
	elapsed    time.Duration // worker start to the start of the last job
	drainStart time.Duration
	enq        []time.Duration // when each job's enqueue was called
	start      []time.Duration // when each job's handler started (0: never)
	cost       cost
}

func (r drainResult) rate() float64 { return float64(r.done) / r.elapsed.Seconds() }

// runDrain runs spec against sys on an empty server; c counts the
// worker's client.
func (b *bench) runDrain(ctx context.Context, sys system, c *counter, spec drainSpec) (drainResult, error) {
	if err := b.flush(ctx); err != nil {
		return drainResult{}, err
	}
	r := drainResult{sys: sys.name(), n: spec.n, enq: make([]time.Duration, spec.n), start: make([]time.Duration, spec.n)}
	for _, g := range spec.groups {
		if err := b.produce(ctx, sys, g[0], g[1], b.o.producers, spec.tenantOf, r.enq, nil); err != nil {
			return r, err
		}
	}

	starts := make([]atomic.Int64, spec.n)
	var done atomic.Int64
	var lastAt atomic.Int64
	all := make(chan struct{})
	started := func(i int) {
		if i < 0 || i >= spec.n {
			return
		}
		at := int64(b.since())
		if starts[i].CompareAndSwap(0, at) { // a job run twice counts once
			if done.Add(1) == int64(spec.n) {
				lastAt.Store(at)
				close(all)
			}
		}
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.o.phaseTimeout)
	defer cancel()
	m0, err := b.mark(ctx, c)
	if err != nil {
		return r, err
	}
	r.drainStart = b.since()
	// The systems' goroutines inherit a label, so that a -cpuprofile
	// can be read per system: go tool pprof -tagfocus sys=sluice.
	var startErr error
	pprof.Do(ctx, pprof.Labels("sys", sys.name()), func(context.Context) { startErr = sys.start(started) })
	if startErr != nil {
		return r, startErr
	}
	arrivals := make(chan error, 1)
	actx, stopArrivals := context.WithCancel(ctx)
	defer stopArrivals()
	if spec.arrive[1] > spec.arrive[0] {
		go func() { arrivals <- b.arrive(actx, sys, spec, r.enq) }()
	} else {
		arrivals <- nil
	}

	var runErr error
	select {
	case <-all:
	case <-ctx.Done():
		r.timedOut = true
	}
	stopArrivals()
	if parent.Err() != nil { // interrupted, or the whole run's -timeout
		<-arrivals
		sys.stop()
		return r, parent.Err()
	}
	if err := <-arrivals; err != nil && !r.timedOut && !errors.Is(err, context.Canceled) {
		runErr = err
	}
	m1, err := b.mark(context.WithoutCancel(ctx), c)
	sys.stop()
	if err != nil {
		return r, err
	}
	r.cost = m1.sub(m0)
	r.done = int(done.Load())
	if r.timedOut {
		r.elapsed = m1.at.Sub(m0.at)
	} else {
		r.elapsed = time.Duration(lastAt.Load()) - r.drainStart
	}
	for i := range starts {
		r.start[i] = time.Duration(starts[i].Load())
	}
	return r, runErr
}

// arrive enqueues spec's arrivals at spec.rate from the drain's start,
// from the configured number of producers.
func (b *bench) arrive(ctx context.Context, sys system, spec drainSpec, enq []time.Duration) error {
	due := make(chan int, 1024)
	go func() {
		defer close(due)
		t0 := time.Now()
		for k := spec.arrive[0]; k < spec.arrive[1]; k++ {
			at := t0.Add(time.Duration(float64(k-spec.arrive[0]) / spec.rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			select {
			case due <- k:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < b.o.producers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range due {
				enq[i] = b.since()
				if err := sys.enqueue(ctx, i, spec.tenantOf(i), b.payload(i)); err != nil {
					once.Do(func() { first = fmt.Errorf("%s: enqueue of arriving job %d: %w", sys.name(), i, err) })
				}
			}
		}()
	}
	wg.Wait()
	return first
}
