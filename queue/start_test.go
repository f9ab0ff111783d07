package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/scripts"
)

// startHook is a go-redis hook that counts the queue_start calls a client
// makes and the jobs in them, and lets a test hold or fail a call before it
// reaches Redis.
type startHook struct {
	mu    sync.Mutex
	calls int
	jobs  int
	most  int // jobs in the largest call
	// before, when set, runs before each call with the call's job keys;
	// an error is the call's answer, and Redis never sees it.
	before func(ctx context.Context, keys []string) error
}

// startJobs returns the job keys of cmd when it runs queue_start.
func startJobs(cmd redis.Cmder) ([]string, bool) {
	a := cmd.Args()
	if len(a) < 3 {
		return nil, false
	}
	name, _ := a[0].(string)
	body, _ := a[1].(string)
	switch strings.ToLower(name) {
	case "evalsha":
		if body != scripts.QueueStart.Hash() {
			return nil, false
		}
	case "eval":
		if body == "" || !strings.Contains(body, "counted out now") {
			return nil, false
		}
	default:
		return nil, false
	}
	nkeys := fmt.Sprint(a[2])
	if nkeys != "6" || len(a) < 9 {
		return nil, false
	}
	var keys []string
	for i := 9; i < len(a); i += 4 {
		keys = append(keys, fmt.Sprint(a[i]))
	}
	return keys, true
}

func (h *startHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *startHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *startHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		keys, ok := startJobs(cmd)
		if !ok {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		before := h.before
		h.mu.Unlock()
		if before != nil {
			if err := before(ctx, keys); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			return err // Script.Run sends EVAL next; that one counts
		}
		h.mu.Lock()
		h.calls++
		h.jobs += len(keys)
		h.most = max(h.most, len(keys))
		h.mu.Unlock()
		return err
	}
}

func (h *startHook) counts() (calls, jobs, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls, h.jobs, h.most
}

func (h *startHook) setBefore(f func(ctx context.Context, keys []string) error) {
	h.mu.Lock()
	h.before = f
	h.mu.Unlock()
}

// TestStartsGroupCommitted: a server with 20 workers drains 300 jobs of 3
// tenants while every queue_start call takes 20 ms longer than Redis needs:
// the concurrent starts share calls, so there are far fewer calls than
// jobs; every job runs once, is counted started once, and the depths end
// at zero.
func TestStartsGroupCommitted(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		const n = 300
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for i := 0; i < n; i++ {
			r, err := p.Enqueue(context.Background(), Job{Tenant: fmt.Sprintf("t%d", i%3), Type: "noop"})
			if err != nil {
				t.Fatal(err)
			}
			ids[r.ID] = true
		}
		hook := &startHook{before: func(ctx context.Context, _ []string) error {
			time.Sleep(20 * time.Millisecond)
			return nil
		}}
		client.AddHook(hook)
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg, cfg.Queue)
		rec := newRecorder()
		startServer(t, client, ServerConfig{Config: cfg, Concurrency: 20, Metrics: m}, rec)
		waitFor(t, 30*time.Second, "300 jobs to run", func() bool { return rec.count() >= n })
		waitFor(t, 5*time.Second, "depth 0", func() bool {
			st, err := p.Stats(context.Background())
			return err == nil && st.Depth == 0 && len(st.ByClass) == 0
		})
		rec.mu.Lock()
		for id := range ids {
			if rec.runs[id] != 1 {
				t.Errorf("job %s ran %d times", id, rec.runs[id])
			}
		}
		rec.mu.Unlock()
		calls, jobs, most := hook.counts()
		t.Logf("%d starts in %d queue_start calls (%.1f a call, at most %d)", jobs, calls, float64(jobs)/float64(calls), most)
		if jobs != n {
			t.Errorf("queue_start was asked for %d starts; want %d", jobs, n)
		}
		if calls > n/3 {
			t.Errorf("%d queue_start calls for %d concurrent starts; want them batched", calls, n)
		}
		if most > startBatch {
			t.Errorf("a call recorded %d starts; the cap is %d", most, startBatch)
		}
		if got := counterValue(t, reg, "sluice_queue_started_total"); got != n {
			t.Errorf("started metric %v; want %d", got, n)
		}
	})
}

// counterValue returns the value of the counter name in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// handedJobs enqueues n jobs of three tenants and hands them to asynq with
// the server's dispatcher (no asynq server runs: they stay handed over, not
// started), and returns them with their encoded tenants.
func handedJobs(t *testing.T, s *Server, p *Producer, n int) ([]*Job, []string) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if _, err := p.Enqueue(ctx, Job{Tenant: fmt.Sprintf("t%d", i%3), Type: "noop"}); err != nil {
			t.Fatal(err)
		}
	}
	for tries := 0; ; tries++ {
		h, err := s.client.ZCard(ctx, s.keys.handed).Result()
		if err != nil {
			t.Fatal(err)
		}
		if h == int64(n) {
			break
		}
		if tries > 100 {
			t.Fatalf("%d of %d jobs handed over", h, n)
		}
		if _, err := s.dispatchOne(ctx); err != nil {
			t.Fatal(err)
		}
	}
	envs, err := s.client.HGetAll(ctx, s.keys.envelopes).Result()
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*Job
	var encs []string
	for _, env := range envs {
		j, err := decodeJob([]byte(env))
		if err != nil {
			t.Fatal(err)
		}
		enc, _, _ := s.keys.tenant(j.Tenant)
		jobs = append(jobs, j)
		encs = append(encs, enc)
	}
	slices.SortFunc(jobs, func(a, b *Job) int { return strings.Compare(a.key(), b.key()) })
	for i, j := range jobs {
		encs[i], _, _ = s.keys.tenant(j.Tenant)
	}
	return jobs, encs
}

// recorderServer returns a server on client whose start recorder runs
// (and no asynq server), with the hook on client and queue_start loaded.
func recorderServer(t *testing.T, client redis.UniversalClient, hook *startHook) (*Server, *Producer) {
	t.Helper()
	cfg := testConfig(t, 1000)
	p, err := NewProducer(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(client, ServerConfig{Config: cfg, Prefetch: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Loaded, the script is never sent twice (EVALSHA, NOSCRIPT, EVAL),
	// so a hook that holds a call holds it once.
	if err := scripts.QueueStart.Load(context.Background(), client).Err(); err != nil {
		t.Fatal(err)
	}
	client.AddHook(hook)
	s.runRecorder()
	t.Cleanup(s.stopRecorder)
	return s, p
}

// depths returns the queue's depth and the jobs still handed over.
func depths(t *testing.T, s *Server) (depth, handed int64) {
	t.Helper()
	ctx := context.Background()
	depth, err := s.client.HGet(ctx, s.keys.meta, "depth").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	handed, err = s.client.ZCard(ctx, s.keys.handed).Result()
	if err != nil {
		t.Fatal(err)
	}
	return depth, handed
}

// TestStartResultsPerJob: one batch holds the starts of 20 handed-over
// jobs, each asked twice, and of a job the queue does not know. Each job
// is counted out by exactly one of its two requests, the unknown job by
// none, as one call per request would have answered.
func TestStartResultsPerJob(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		hold, firstIn := make(chan struct{}), make(chan struct{})
		var first sync.Once
		hook := &startHook{}
		hook.before = func(ctx context.Context, _ []string) error {
			held := false
			first.Do(func() { held = true })
			if held { // the first call waits until the rest are pending
				close(firstIn)
				select {
				case <-hold:
				case <-ctx.Done():
				}
			}
			return nil
		}
		s, p := recorderServer(t, client, hook)
		jobs, encs := handedJobs(t, s, p, 20)
		ctx := context.Background()

		// The first start is held in its call while the others queue.
		firstDone := make(chan startAnswer, 1)
		go func() {
			ok, err := s.markStarted(ctx, jobs[0], encs[0])
			firstDone <- startAnswer{ok, err}
		}()
		<-firstIn

		type result struct {
			job     int
			started bool
			err     error
		}
		results := make(chan result, 64)
		var wg sync.WaitGroup
		ask := func(i int, j *Job, enc string) {
			wg.Go(func() {
				ok, err := s.markStarted(ctx, j, enc)
				results <- result{i, ok, err}
			})
		}
		for i := 1; i < len(jobs); i++ {
			ask(i, jobs[i], encs[i])
		}
		for i := range jobs {
			ask(i, jobs[i], encs[i]) // again: a duplicate start
		}
		stranger := &Job{ID: "stranger", Nonce: "n0", Tenant: "t0", Type: "noop"}
		ask(-1, stranger, encs[0])
		time.Sleep(300 * time.Millisecond) // let them all queue
		close(hold)
		a := <-firstDone
		wg.Wait()
		close(results)
		if a.err != nil {
			t.Fatal(a.err)
		}
		counted := map[int]int{}
		if a.started {
			counted[0]++
		}
		for r := range results {
			if r.err != nil {
				t.Fatalf("job %d: %v", r.job, r.err)
			}
			if r.started {
				counted[r.job]++
			}
		}
		for i := range jobs {
			if counted[i] != 1 {
				t.Errorf("job %d counted started %d times; want once", i, counted[i])
			}
		}
		if counted[-1] != 0 {
			t.Errorf("the unknown job was counted started")
		}
		calls, asked, _ := hook.counts()
		t.Logf("%d starts in %d calls", asked, calls)
		if asked != 2*len(jobs)+1 {
			t.Errorf("%d starts asked of Redis; want %d", asked, 2*len(jobs)+1)
		}
		if calls > 4 {
			t.Errorf("%d calls for %d pending starts; want them batched", calls, asked)
		}
		if d, h := depths(t, s); d != 0 || h != 0 {
			t.Errorf("depth %d, %d handed over; want 0, 0", d, h)
		}
		if n, err := s.client.HLen(ctx, s.keys.ids).Result(); err != nil || n != 0 {
			t.Errorf("%d ids left in the queue (%v)", n, err)
		}
	})
}

// TestStartCanceledWaiter: a job whose context ends while its start is in
// a call in flight returns at once, and the other jobs of that call get
// their answers; a job whose context has ended while the recorder is busy
// is not recorded at all; afterwards the recorder goes on.
func TestStartCanceledWaiter(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		entered := make(chan []string, 16)
		release := make(chan struct{})
		hook := &startHook{}
		hook.before = func(ctx context.Context, keys []string) error {
			entered <- keys
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		s, p := recorderServer(t, client, hook)
		jobs, encs := handedJobs(t, s, p, 5)
		a, b, c, d, e := 0, 1, 2, 3, 4
		ctx := context.Background()

		type result struct {
			started bool
			err     error
		}
		ask := func(ctx context.Context, i int) chan result {
			ch := make(chan result, 1)
			go func() {
				ok, err := s.markStarted(ctx, jobs[i], encs[i])
				ch <- result{ok, err}
			}()
			return ch
		}
		ra := ask(ctx, a)
		if got := <-entered; len(got) != 1 || got[0] != jobs[a].key() {
			t.Fatalf("first call for %v; want job a", got)
		}
		// The recorder is busy: b, c and d queue; e's context has ended.
		cctx, cancelC := context.WithCancel(ctx)
		defer cancelC()
		rb, rc, rd := ask(ctx, b), ask(cctx, c), ask(ctx, d)
		ectx, cancelE := context.WithCancel(ctx)
		cancelE()
		if _, err := s.markStarted(ectx, jobs[e], encs[e]); !errors.Is(err, errNotFailure) || !strings.Contains(err.Error(), "canceled") {
			t.Fatalf("start with an ended context: %v; want a canceled not-a-failure", err)
		}
		time.Sleep(200 * time.Millisecond) // let b, c, d queue
		release <- struct{}{}
		if r := <-ra; r.err != nil || !r.started {
			t.Fatalf("job a: %+v", r)
		}
		// Release calls until the one with c is held; cancel c there.
		for seen := 0; ; {
			keys := <-entered
			seen += len(keys)
			if slices.Contains(keys, jobs[c].key()) {
				t.Logf("c's call holds %d starts", len(keys))
				cancelC()
				select {
				case r := <-rc:
					if !errors.Is(r.err, errNotFailure) || !errors.Is(r.err, context.Canceled) && !strings.Contains(r.err.Error(), "canceled") {
						t.Fatalf("job c: %+v; want canceled", r)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("job c still waits for its call after its context ended")
				}
				release <- struct{}{}
				break
			}
			release <- struct{}{}
			if seen > 3 {
				t.Fatal("no call held job c")
			}
		}
		// The rest of b and d, if any, in further calls.
		go func() {
			for range entered {
				release <- struct{}{}
			}
		}()
		for name, ch := range map[string]chan result{"b": rb, "d": rd} {
			if r := <-ch; r.err != nil || !r.started {
				t.Fatalf("job %s: %+v", name, r)
			}
		}
		// c's start went to Redis with its call; e's never did.
		if dep, h := depths(t, s); dep != 1 || h != 1 {
			t.Fatalf("depth %d, %d handed over; want e's 1, 1", dep, h)
		}
		if ok, err := s.markStarted(ctx, jobs[c], encs[c]); err != nil || ok {
			t.Fatalf("c again: %v, %v; want started already", ok, err)
		}
		if ok, err := s.markStarted(ctx, jobs[e], encs[e]); err != nil || !ok {
			t.Fatalf("e again: %v, %v; want counted out now", ok, err)
		}
		if dep, h := depths(t, s); dep != 0 || h != 0 {
			t.Fatalf("depth %d, %d handed over; want 0, 0", dep, h)
		}
		hook.setBefore(nil)
		close(entered)
	})
}

// TestStartErrorAnswersBatch: a call that fails (Redis unreachable)
// answers every job of its batch with a not-a-failure error, and records
// nothing.
func TestStartErrorAnswersBatch(t *testing.T) {
	client := redistest.Shared(t)
	hold := make(chan struct{})
	var calls sync.Mutex
	n := 0
	hook := &startHook{}
	hook.before = func(ctx context.Context, keys []string) error {
		calls.Lock()
		n++
		k := n
		calls.Unlock()
		if k == 1 {
			select {
			case <-hold:
			case <-ctx.Done():
			}
		}
		return errors.New("dial tcp: connection refused")
	}
	s, p := recorderServer(t, client, hook)
	jobs, encs := handedJobs(t, s, p, 6)
	ctx := context.Background()
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			_, err := s.markStarted(ctx, jobs[i], encs[i])
			errs <- err
		})
		if i == 0 {
			waitFor(t, 5*time.Second, "the first call", func() bool { calls.Lock(); defer calls.Unlock(); return n == 1 })
		}
	}
	time.Sleep(200 * time.Millisecond)
	close(hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, errNotFailure) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("start: %v; want the call's error as not a failure", err)
		}
	}
	calls.Lock()
	t.Logf("%d jobs, %d calls", len(jobs), n)
	if n > 3 {
		t.Errorf("%d calls for %d jobs", n, len(jobs))
	}
	calls.Unlock()
	if d, h := depths(t, s); d != int64(len(jobs)) || h != int64(len(jobs)) {
		t.Fatalf("depth %d, %d handed over; want nothing recorded", d, h)
	}
}

// TestShutdownStopsRecorder: Shutdown stops the start recorder with the
// server: no goroutine of it is left, a start asked afterwards fails at
// once, and a failed Start leaves none either.
func TestShutdownStopsRecorder(t *testing.T) {
	client := redistest.Shared(t)
	cfg := testConfig(t, 1000)
	p, err := NewProducer(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := p.Enqueue(context.Background(), Job{Tenant: "a", Type: "noop"}); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	s := startServer(t, client, ServerConfig{Config: cfg, Concurrency: 4}, rec)
	waitFor(t, 20*time.Second, "20 jobs to run", func() bool { return rec.count() >= 20 })
	s.Shutdown()
	select {
	case <-s.starts.done:
	default:
		t.Fatal("the recorder runs after Shutdown")
	}
	if recorderGoroutines() != 0 {
		t.Fatal("a recorder goroutine runs after Shutdown")
	}
	if _, err := s.markStarted(context.Background(), &Job{ID: "x", Tenant: "a", Type: "noop"}, "a"); !errors.Is(err, errStopped) {
		t.Fatalf("start after Shutdown: %v; want errStopped", err)
	}
	// Starting a stopped server fails (asynq's server cannot restart)
	// and starts no recorder.
	if err := s.Start(rec); err == nil {
		t.Fatal("a shut-down server started again")
	}
	if recorderGoroutines() != 0 {
		t.Fatal("a failed Start left a recorder goroutine")
	}
	s.Shutdown() // twice is fine
}

// recorderGoroutines counts the goroutines running a start recorder.
func recorderGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Count(string(buf), "queue.(*Server).recordLoop")
}
