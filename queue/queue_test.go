package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/throttle"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func forEachTarget(t *testing.T, f func(t *testing.T, client redis.UniversalClient)) {
	for _, tg := range redistest.Targets() {
		t.Run(tg.Name, func(t *testing.T) { f(t, tg.Client(t)) })
	}
}

// testConfig returns a waiting room of its own for t.
func testConfig(t *testing.T, bound int64) Config {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(redistest.KeyPrefix(t))
	name = strings.Trim(name, ":")
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	return Config{Queue: "q" + strings.ReplaceAll(name, ":", "_"), Bound: bound}
}

// TestBoundIsExact: 50 concurrent producers against a bound of 1,000:
// exactly 1,000 accepted, the rest refused with QueueFullError.
func TestBoundIsExact(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		var accepted, full atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 50; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 30; i++ {
					_, err := p.Enqueue(context.Background(), Job{Tenant: fmt.Sprintf("t%d", g%7), Type: "noop"})
					var qf *QueueFullError
					switch {
					case err == nil:
						accepted.Add(1)
					case errors.As(err, &qf):
						if qf.Bound != 1000 || qf.Depth != 1000 {
							t.Errorf("queue full at depth %d of %d", qf.Depth, qf.Bound)
						}
						full.Add(1)
					default:
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if accepted.Load() != 1000 || full.Load() != 500 {
			t.Fatalf("accepted %d, refused %d; want 1000 and 500", accepted.Load(), full.Load())
		}
		st, err := p.Stats(context.Background())
		if err != nil || st.Depth != 1000 || st.Tenants != 7 {
			t.Fatalf("stats %+v, %v", st, err)
		}
		// Hand everything to asynq (its one worker holds the first job):
		// asynq's Inspector counts the same 1,000.
		release := make(chan struct{})
		defer close(release)
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Prefetch: 2000},
			HandlerFunc(func(ctx context.Context, j *Job) error { <-release; return nil }))
		ins := asynq.NewInspectorFromRedisClient(client)
		waitFor(t, 30*time.Second, "asynq to hold the 1,000 jobs", func() bool {
			info, err := ins.GetQueueInfo(cfg.Queue)
			return err == nil && info.Pending+info.Active == 1000
		})
		if st, _ := p.Stats(context.Background()); st.Depth != 999 || st.HandedOver != 999 {
			t.Fatalf("stats %+v; want 999 handed over and not started (one running)", st)
		}
	})
}

func TestAdmissionAndTenantBound(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		cfg.TenantBound = 3
		pol := algorithms.Policy{Algorithm: algorithms.FixedWindow, Limit: 2, Period: time.Hour}
		cfg.Tenants = func(tenant string) TenantPolicy {
			if tenant == "limited" {
				return TenantPolicy{Admission: &pol, Class: "gold"}
			}
			return TenantPolicy{}
		}
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := 0; i < 2; i++ {
			r, err := p.Enqueue(ctx, Job{Tenant: "limited", Type: "x"})
			if err != nil || r.Decision.Remaining != int64(1-i) {
				t.Fatalf("call %d: %+v, %v", i, r, err)
			}
		}
		_, err = p.Enqueue(ctx, Job{Tenant: "limited", Type: "x"})
		var rl *RateLimitedError
		if !errors.As(err, &rl) || rl.Decision.RetryAfter <= 0 || rl.Decision.Limit != 2 || rl.Decision.Remaining != 0 {
			t.Fatalf("third call: %v; want rate limited with a retry-after", err)
		}
		for i := 0; i < 3; i++ {
			if _, err := p.Enqueue(ctx, Job{Tenant: "other", Type: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		_, err = p.Enqueue(ctx, Job{Tenant: "other", Type: "x"})
		var qf *QueueFullError
		if !errors.As(err, &qf) || qf.Tenant != "other" || qf.Bound != 3 {
			t.Fatalf("fourth job of a tenant bound to 3: %v", err)
		}
		if d, _ := p.TenantDepth(ctx, "other"); d != 3 {
			t.Fatalf("tenant depth %d, want 3", d)
		}
		// Backlog per metrics class: refused jobs are not counted.
		if st, err := p.Stats(ctx); err != nil || st.ByClass["gold"] != 2 || st.ByClass["default"] != 3 || len(st.ByClass) != 2 || st.Depth != 5 {
			t.Fatalf("stats %+v, %v; want 2 gold and 3 default", st, err)
		}
		// The default class is the depth less the counted classes.
		k := p.shards[0]
		if n, err := client.HExists(ctx, k.cdepth, defaultClass).Result(); err != nil || n {
			t.Fatalf("the default class is counted in %s (%v)", k.cdepth, err)
		}
	})
}

// TestBadJobsChangeNothing: every invalid job gets a clear error and the
// waiting room stays empty.
func TestBadJobsChangeNothing(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 10)
		cfg.MaxPayload = 100
		pol := algorithms.Policy{Algorithm: algorithms.TokenBucket, Limit: 5, Period: time.Second}
		cfg.Tenants = func(string) TenantPolicy { return TenantPolicy{Admission: &pol} }
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			job  Job
			want string
		}{
			{Job{Type: "x"}, "tenant is required"},
			{Job{Tenant: "a"}, "type is required"},
			{Job{Tenant: strings.Repeat("m", 1<<20), Type: "x"}, "tenant id is 1048576 bytes; the limit is 1024"},
			{Job{Tenant: "a", Type: "x", Payload: make([]byte, 101)}, "payload is 101 bytes; the limit is 100"},
			{Job{Tenant: "a", Type: "x", ID: "has space"}, "id"},
			{Job{Tenant: "a", Type: "bad type!"}, "type"},
			{Job{Tenant: "a", Type: "x", Cost: 6}, "exceeds the capacity 5"},
			{Job{Tenant: "a", Type: "x", Cost: -1}, "cost must not be negative"},
			{Job{Tenant: "a", Type: "x", MaxRetry: -2}, "max_retry"},
		} {
			_, err := p.Enqueue(context.Background(), c.job)
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("job %.60v: got %v; want ErrInvalidJob mentioning %q", c.job, err, c.want)
			}
		}
		if st, err := p.Stats(context.Background()); err != nil || st.Depth != 0 || st.Tenants != 0 {
			t.Fatalf("after bad jobs: %+v, %v", st, err)
		}
		// Hostile but valid tenant ids are accepted and kept apart.
		for _, tenant := range []string{"{a}", "a}", "a:b", "new\nline", "ünï", strings.Repeat("x", 1024)} {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: tenant, Type: "x"}); err != nil {
				t.Fatalf("tenant %.20q: %v", tenant, err)
			}
		}
		if st, _ := p.Stats(context.Background()); st.Tenants != 6 {
			t.Fatalf("%d tenants, want 6", st.Tenants)
		}
	})
}

// recorder is a handler that records which jobs ran and when.
type recorder struct {
	mu    sync.Mutex
	runs  map[string]int
	order []*Job
	at    []time.Time
	err   func(*Job) error
}

func newRecorder() *recorder { return &recorder{runs: map[string]int{}} }

func (r *recorder) ProcessJob(ctx context.Context, j *Job) error {
	r.mu.Lock()
	r.runs[j.ID]++
	r.order = append(r.order, j)
	r.at = append(r.at, time.Now())
	f := r.err
	r.mu.Unlock()
	if f != nil {
		return f(j)
	}
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startServer(t *testing.T, client redis.UniversalClient, cfg ServerConfig, h Handler) *Server {
	t.Helper()
	cfg.PollInterval = 10 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	s, err := NewServer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(h); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func TestEndToEnd(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		ids := map[string]bool{}
		for i := 0; i < 60; i++ {
			r, err := p.Enqueue(context.Background(), Job{Tenant: fmt.Sprintf("t%d", i%3), Type: "noop", Payload: []byte(fmt.Sprint(i))})
			if err != nil {
				t.Fatal(err)
			}
			ids[r.ID] = true
		}
		// One worker: with more, jobs of one tenant start in order but may
		// overlap, and the order they reach the handler is a race.
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1}, rec)
		waitFor(t, 20*time.Second, "60 jobs to run", func() bool { return rec.count() >= 60 })
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for id := range ids {
			if rec.runs[id] != 1 {
				t.Fatalf("job %s ran %d times", id, rec.runs[id])
			}
		}
		// Per tenant, first in first out.
		last := map[string]int{}
		for _, j := range rec.order {
			var n int
			fmt.Sscan(string(j.Payload), &n)
			if prev, ok := last[j.Tenant]; ok && n < prev {
				t.Fatalf("tenant %s: job %d ran after job %d", j.Tenant, n, prev)
			}
			last[j.Tenant] = n
		}
		waitFor(t, 5*time.Second, "depth 0", func() bool {
			st, err := p.Stats(context.Background())
			return err == nil && st.Depth == 0 && len(st.ByClass) == 0
		})
	})
}

// TestThrottledJobsSpendNoRetry: jobs whose slot is too far away go back
// to the waiting room; none is archived, not even with no retries at all,
// and the handler sees them no faster than the downstream's rate.
func TestThrottledJobsSpendNoRetry(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 12; i++ {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "call", Downstream: "api", MaxRetry: -1}); err != nil {
				t.Fatal(err)
			}
		}
		th := testThrottle(t, client, nil)
		lim := throttle.Limit{Rate: 20, MaxWait: 60 * time.Millisecond}
		rec := newRecorder()
		srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 6, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return Downstream{Limit: lim}, name == "api" }}, rec)
		waitFor(t, 20*time.Second, "12 jobs to run", func() bool { return rec.count() >= 12 })
		rec.mu.Lock()
		first, last := rec.at[0], rec.at[len(rec.at)-1]
		rec.mu.Unlock()
		// 12 calls at 20/s take 11 intervals of 50ms; a late wake-up of
		// the first may shorten the measured span by a little.
		if span := last.Sub(first); span < 10*50*time.Millisecond {
			t.Fatalf("12 jobs ran within %v; the throttle allows 20/s", span)
		}
		ins := asynq.NewInspectorFromRedisClient(client)
		if info, err := ins.GetQueueInfo(srv.cfg.Queue); err != nil || info.Archived != 0 || info.Retry != 0 {
			t.Fatalf("asynq queue: %+v, %v; want nothing archived or retried", info, err)
		}
	})
}
