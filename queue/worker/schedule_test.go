package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
)

// recorder passes EnqueueTick to a producer and records the ticks it
// enqueued.
type recorder struct {
	p    *queue.Producer
	mu   *sync.Mutex
	got  map[string][]time.Time // by schedule
	jobs map[string]bool        // job ids
	dup  *atomic.Int64          // ticks enqueued twice
}

func (r recorder) EnqueueTick(ctx context.Context, schedule string, tick time.Time, job queue.Job) (queue.Receipt, error) {
	rc, err := r.p.EnqueueTick(ctx, schedule, tick, job)
	if err == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.jobs[job.ID] {
			r.dup.Add(1)
		}
		r.jobs[job.ID] = true
		r.got[schedule] = append(r.got[schedule], tick)
	}
	return rc, err
}

// TestSchedulerOncePerTick: three workers' schedulers, on one clock that
// moves a second a step, race for the ticks of an interval and a cron
// schedule; the third stops a third of the way in (killed), and later
// no worker runs for ten minutes. Every tick is enqueued exactly once
// while any worker runs; of the ticks no worker saw, only the latest is
// enqueued, as it is within catch_up (no backfill); and the queue holds
// one job per enqueued tick.
func TestSchedulerOncePerTick(t *testing.T) {
	for _, tg := range redistest.Targets() {
		t.Run(tg.Name, func(t *testing.T) {
			client := tg.Client(t)
			name := strings.NewReplacer(":", "_", "/", "_").Replace(strings.Trim(redistest.KeyPrefix(t), ":"))
			cfg, err := policy.Parse([]byte("queue: {name: " + name + ", bound: 1000, shards: 3, types: [report]}\n" +
				"schedules:\n" +
				"  minutely: {every: 1m, tenant: acme, job: {type: report}}\n" +
				"  even: {cron: \"*/2 * * * *\", tenant: beta, catch_up: 90s, job: {type: report, payload: {x: 1}}}\n"))
			if err != nil {
				t.Fatal(err)
			}
			qc := cfg.QueueConfig()
			var clock atomic.Int64
			t0 := time.Date(2026, 11, 27, 9, 0, 0, 500_000_000, time.UTC)
			clock.Store(t0.UnixNano())
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			rec := recorder{mu: &sync.Mutex{}, got: map[string][]time.Time{}, jobs: map[string]bool{}, dup: &atomic.Int64{}}
			counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t"}, []string{"schedule", "result"})
			var scheds []*scheduler
			for range 3 {
				p, err := queue.NewProducer(client, &qc)
				if err != nil {
					t.Fatal(err)
				}
				r := rec
				r.p = p
				scheds = append(scheds, newScheduler(r, cfg.Schedules, now, slog.New(slog.NewTextHandler(io.Discard, nil)), counter))
			}
			ctx := context.Background()
			run := func(from, to time.Time, alive func(i int) bool) {
				for at := from; !at.After(to); at = at.Add(time.Second) {
					clock.Store(at.UnixNano())
					var wg sync.WaitGroup
					for i, s := range scheds {
						if alive(i) {
							wg.Go(func() { s.step(ctx) })
						}
					}
					wg.Wait()
				}
			}
			stop := t0.Add(7 * time.Minute)
			run(t0, t0.Add(20*time.Minute), func(i int) bool { return i < 2 || clock.Load() < stop.UnixNano() })
			// No worker for ten minutes; then two again.
			resume := t0.Add(30*time.Minute + 20*time.Second)
			end := t0.Add(36 * time.Minute)
			run(resume, end, func(i int) bool { return i < 2 })

			if rec.dup.Load() != 0 {
				t.Errorf("%d ticks enqueued twice", rec.dup.Load())
			}
			total := 0
			for _, sc := range cfg.Schedules {
				// Every tick from the first within catch_up of t0 to the
				// last step before the gap; the latest tick at resume; the
				// ticks after it.
				var want []time.Time
				for tick := sc.Next(t0.Add(-sc.CatchUp - 1)); !tick.After(t0.Add(20 * time.Minute)); tick = sc.Next(tick) {
					want = append(want, tick)
				}
				latest := want[len(want)-1]
				for tick := latest; !tick.After(resume); tick = sc.Next(tick) {
					latest = tick
				}
				for tick := latest; !tick.After(end); tick = sc.Next(tick) {
					want = append(want, tick)
				}
				got := rec.got[sc.Name]
				if len(got) != len(want) {
					t.Errorf("%s: %d ticks enqueued, want %d:\n got %v\nwant %v", sc.Name, len(got), len(want), got, want)
					continue
				}
				for i := range want {
					if !got[i].Equal(want[i]) {
						t.Errorf("%s: tick %d is %v, want %v", sc.Name, i, got[i], want[i])
					}
				}
				if n := testutil.ToFloat64(counter.WithLabelValues(sc.Name, tickEnqueued)); int(n) != len(want) {
					t.Errorf("%s: %v counted enqueued, want %d", sc.Name, n, len(want))
				}
				// The workers that lost a race found the tick taken: none
				// was refused by the queue (the job's id, the same for
				// every worker, would refuse it as a duplicate only while
				// the job waits in the room; the tick stays claimed).
				if n := testutil.ToFloat64(counter.WithLabelValues(sc.Name, tickRefused)); n != 0 {
					t.Errorf("%s: %v ticks refused by the queue, want 0", sc.Name, n)
				}
				if n := testutil.ToFloat64(counter.WithLabelValues(sc.Name, tickTaken)); int(n) < len(want) {
					t.Errorf("%s: %v ticks found taken, want at least one a tick, %d", sc.Name, n, len(want))
				}
				if testutil.ToFloat64(counter.WithLabelValues(sc.Name, tickMissed)) == 0 {
					t.Errorf("%s: the ticks of the gap were not counted missed", sc.Name)
				}
				total += len(want)
			}
			p, _ := queue.NewProducer(client, &qc)
			st, err := p.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Depth != int64(total) {
				t.Errorf("the queue holds %d jobs, want one per tick, %d", st.Depth, total)
			}
		})
	}
}

// TestSchedulerSkipsLateTick: a worker that starts more than catch_up
// after a tick does not run it, and runs the next one.
func TestSchedulerSkipsLateTick(t *testing.T) {
	cfg, err := policy.Parse([]byte("queue: {bound: 10}\nschedules:\n  nightly: {cron: \"0 3 * * *\", tenant: a, catch_up: 10m, job: {type: report}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []time.Time
	fake := tickFunc(func(tick time.Time) {
		mu.Lock()
		got = append(got, tick)
		mu.Unlock()
	})
	at := time.Date(2026, 11, 27, 3, 11, 0, 0, time.UTC)
	s := newScheduler(fake, cfg.Schedules, func() time.Time { return at }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	steps := []struct {
		at   time.Time
		want int
	}{
		{time.Date(2026, 11, 27, 3, 11, 0, 0, time.UTC), 0},  // 11 minutes late: skipped
		{time.Date(2026, 11, 28, 2, 59, 59, 0, time.UTC), 0}, // not yet
		{time.Date(2026, 11, 28, 3, 9, 0, 0, time.UTC), 1},   // 9 minutes late: run
		{time.Date(2026, 11, 28, 3, 9, 1, 0, time.UTC), 1},   // once
	}
	for _, st := range steps {
		at = st.at
		s.step(context.Background())
		if len(got) != st.want {
			t.Fatalf("at %v: %d ticks, want %d", st.at, len(got), st.want)
		}
	}
	if !got[0].Equal(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)) {
		t.Errorf("ran tick %v", got[0])
	}
}

type tickFunc func(time.Time)

func (f tickFunc) EnqueueTick(_ context.Context, _ string, tick time.Time, _ queue.Job) (queue.Receipt, error) {
	f(tick)
	return queue.Receipt{}, nil
}

// TestSchedulerRetriesFailedTick: a tick that Redis could not be asked
// about claimed nothing, so it is tried again next step while within
// catch_up, and given up (missed) after; a tick the queue refused is
// not tried again.
func TestSchedulerRetriesFailedTick(t *testing.T) {
	cfg, err := policy.Parse([]byte("queue: {bound: 10}\nschedules:\n  s: {every: 1m, tenant: a, catch_up: 5s, job: {type: report}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	answers := []error{errors.New("dial tcp 127.0.0.1:1: connection refused"), nil, // tick 09:01: fails, then in
		&queue.QueueFullError{Queue: "default", Depth: 10, Bound: 10}, // tick 09:02: refused
		errors.New("connection refused")}                              // tick 09:03: fails until given up
	var tries []time.Time
	fake := errFunc(func(tick time.Time) error {
		tries = append(tries, tick)
		err := answers[0]
		if len(answers) > 1 {
			answers = answers[1:]
		}
		return err
	})
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t"}, []string{"schedule", "result"})
	var at time.Time
	s := newScheduler(fake, cfg.Schedules, func() time.Time { return at }, slog.New(slog.NewTextHandler(io.Discard, nil)), counter)
	base := time.Date(2026, 11, 27, 9, 1, 0, 0, time.UTC)
	for i := range 180 { // 09:01:00 to 09:03:59, a second a step
		at = base.Add(time.Duration(i) * time.Second)
		s.step(context.Background())
	}
	m := func(n int) time.Time { return base.Add(time.Duration(n) * time.Minute) }
	want := []time.Time{m(0), m(0), m(1), m(2), m(2), m(2), m(2), m(2), m(2)} // 09:03 tried at 09:03:00 to :05
	if !slices.EqualFunc(tries, want, time.Time.Equal) {
		t.Errorf("tries %v\nwant %v", tries, want)
	}
	for result, n := range map[string]float64{tickEnqueued: 1, tickRefused: 1, tickFailed: 7, tickMissed: 1} {
		if got := testutil.ToFloat64(counter.WithLabelValues("s", result)); got != n {
			t.Errorf("%s counted %v, want %v", result, got, n)
		}
	}
}

type errFunc func(time.Time) error

func (f errFunc) EnqueueTick(_ context.Context, _ string, tick time.Time, _ queue.Job) (queue.Receipt, error) {
	return queue.Receipt{}, f(tick)
}

// TestWorkerRunsSchedules: two workers run from one policy file with a
// schedule of every second; the program's handler receives its jobs,
// each tick's once, with the tick's id and the payload as JSON.
func TestWorkerRunsSchedules(t *testing.T) {
	client := redistest.Start(t, redistest.Config{}).Client(t)
	cfg, err := policy.Parse([]byte("queue: {bound: 100, types: [beat]}\nschedules:\n  beat: {every: 1s, tenant: ops, job: {type: beat, payload: {n: 1}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var payloads []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		log := &syncBuffer{}
		w, err := New(&Config{Policy: cfg, Redis: client, Listener: ln, Concurrency: 2, ShutdownTimeout: time.Second,
			Logger: slog.New(slog.NewTextHandler(log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("beat", func(_ context.Context, job *queue.Job) error {
			mu.Lock()
			defer mu.Unlock()
			seen[job.ID]++
			payloads = append(payloads, string(job.Payload))
			return nil
		})
		runUntilCleanup(t, w, log)
	}
	waitUntil(t, 20*time.Second, "three ticks' jobs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if !strings.HasPrefix(id, "tick:beat:") || n != 1 {
			t.Errorf("job %q ran %d times, want a tick's id, once", id, n)
		}
	}
	if payloads[0] != `{"n":1}` {
		t.Errorf("payload %s", payloads[0])
	}
}
