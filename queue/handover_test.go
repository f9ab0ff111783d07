package queue

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/scripts"
	"github.com/sluicehq/sluice/throttle"
)

// TestHandOverSurvivesDeathBetweenSteps: a dispatcher that died after its
// claim took jobs for the hand-over (before or after it wrote their asynq
// tasks, before it cleared them) loses none and runs none twice: a later
// claim takes the entries again once handingStale has passed, asynq's
// Client writes each task once (a task it holds already is refused by its
// id), and the counts end at zero.
func TestHandOverSurvivesDeathBetweenSteps(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 100)
		clock := &fakeClock{}
		cfg.clock = clock.now
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		k := p.shards[0]
		for i := range 6 {
			if _, err := p.Enqueue(ctx, Job{ID: fmt.Sprintf("j%d", i), Tenant: fmt.Sprintf("t%d", i%2), Type: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		claimOnly := func() []any {
			v, err := scripts.QueueClaim.Run(ctx, client,
				[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.meta, k.cdepth, k.ids, k.asynqPending, k.why, k.later, k.ldepth, k.full, k.held, k.handing},
				100, k.tenantPrefix, s.cfg.now(), claimBatch, idHold.Microseconds(), handingStale.Microseconds()).Slice()
			if err != nil || v[0] != claimTaken {
				t.Fatalf("claim: %v, %v", v, err)
			}
			return v[4:]
		}
		// A dispatcher takes all six and dies; another wrote the tasks of
		// three of them and died before it cleared them.
		taken := claimOnly()
		if len(taken) != 6 {
			t.Fatalf("the claim took %d entries; want 6", len(taken))
		}
		for _, it := range taken[:3] {
			task, opts := s.taskOf(it.(string), k.queue)
			if _, err := s.asynq.EnqueueContext(ctx, task, opts...); err != nil {
				t.Fatal(err)
			}
		}
		// Before handingStale, no claim takes them again.
		if wait, err := s.claim(ctx, s.disp[0]); err != nil || wait == 0 {
			t.Fatalf("a claim before handingStale: %v, %v; want idle", wait, err)
		}
		if n, err := client.ZCard(ctx, k.handing).Result(); err != nil || n != 6 {
			t.Fatalf("handing set holds %d, %v; want 6", n, err)
		}
		clock.advance(handingStale + time.Second)
		if _, err := s.claim(ctx, s.disp[0]); err != nil {
			t.Fatal(err)
		}
		ins := asynq.NewInspectorFromRedisClient(client)
		pending, err := ins.ListPendingTasks(k.queue)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, ti := range pending {
			job, err := decodeJob(ti.Payload)
			if err != nil {
				t.Fatal(err)
			}
			seen[job.ID]++
		}
		for i := range 6 {
			if id := fmt.Sprintf("j%d", i); seen[id] != 1 {
				t.Errorf("job %s is in asynq %d times; want once (%v)", id, seen[id], seen)
			}
		}
		if len(pending) != 6 {
			t.Errorf("asynq holds %d pending tasks; want 6", len(pending))
		}
		st, err := p.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := client.ZCard(ctx, k.handing).Result(); n != 0 || st.Depth != 6 || st.HandedOver != 6 || len(st.ByClass) != 0 {
			t.Errorf("after the hand-over: handing %d, stats %+v; want 0, depth 6 (all handed over)", n, st)
		}
	})
}

// asynqTaskKey is the key of asynq's hash of a task of the shard k.
func asynqTaskKey(k keys, id string) string { return "asynq:{" + k.queue + "}:t:" + id }

// testProducer returns a waiting room of t's own (testConfig) and its
// Producer on client.
func testProducer(t *testing.T, client redis.UniversalClient, bound int64) (Config, *Producer) {
	t.Helper()
	cfg := testConfig(t, bound)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, p
}

// testThrottle returns a throttle on client under t's own key prefix
// (opts' Prefix is set), closed when t ends.
func testThrottle(t *testing.T, client redis.UniversalClient, opts *throttle.Options) *throttle.Throttle {
	t.Helper()
	o := throttle.Options{}
	if opts != nil {
		o = *opts
	}
	o.Prefix = redistest.KeyPrefix(t) + "th"
	th, err := throttle.New(client, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { th.Close() })
	return th
}

// handOverAll enqueues jobs of the ids for tenant "a" and hands them all
// over with one claim of a new Server, without a worker. It returns the
// Server and the jobs' asynq task ids, in the order of the jobs, having
// checked that asynq's pending list holds them in that order.
func handOverAll(t *testing.T, client redis.UniversalClient, cfg Config, p *Producer, ids ...string) (*Server, []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: "a", Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.dispatchOne(ctx); err != nil {
		t.Fatal(err)
	}
	pending, err := client.LRange(ctx, p.shards[0].asynqPending, 0, -1).Result()
	if err != nil || len(pending) != len(ids) {
		t.Fatalf("asynq's pending list %q, %v; want %d tasks", pending, err, len(ids))
	}
	// asynq dequeues from the tail: the oldest is last.
	slices.Reverse(pending)
	for i, task := range pending {
		if !regexp.MustCompile(`^sluice:=[^/]+/` + regexp.QuoteMeta(ids[i]) + `@[0-9a-f]{16}:0$`).MatchString(task) {
			t.Fatalf("task %d: %q; want the task of job %s, in the order of the jobs", i, task, ids[i])
		}
	}
	return s, pending
}

// claimHook counts the queue_claim calls a client makes.
type claimHook struct {
	mu    sync.Mutex
	calls int
}

func (h *claimHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *claimHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *claimHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); len(a) > 1 && a[1] == scripts.QueueClaim.Hash() && (err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT")) {
			h.mu.Lock()
			h.calls++
			h.mu.Unlock()
		}
		return err
	}
}

func (h *claimHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// TestClaimsHandOverBatches: a server with 10 workers drains 600 jobs of 3
// tenants. Its dispatcher claims when a batch's worth of its jobs have
// started, not at every start, and hands a claim's jobs to asynq in the
// same call: far fewer claims than jobs, and no other call per job than
// asynq's own. Every job runs once, and the counts end at zero.
func TestClaimsHandOverBatches(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		const n = 600
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
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
		hook := &claimHook{}
		client.AddHook(hook)
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg, cfg.Queue)
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 10, Metrics: m}, rec)
		waitFor(t, 30*time.Second, "600 jobs to run", func() bool { return rec.count() >= n })
		waitFor(t, 5*time.Second, "depth 0", func() bool {
			st, err := p.Stats(context.Background())
			return err == nil && st.Depth == 0 && st.HandedOver == 0 && len(st.ByClass) == 0
		})
		rec.mu.Lock()
		for id := range ids {
			if rec.runs[id] != 1 {
				t.Errorf("job %s ran %d times", id, rec.runs[id])
			}
		}
		rec.mu.Unlock()
		calls := hook.count()
		t.Logf("%d jobs in %d claims (%.1f a claim)", n, calls, float64(n)/float64(calls))
		// Claims come every 20 starts (twice the concurrency), or when the
		// poll interval has passed with fewer.
		if calls > n/2 {
			t.Errorf("%d claims for %d jobs; want them batched", calls, n)
		}
		for name, want := range map[string]float64{"sluice_queue_started_total": n, "sluice_queue_handed_over_total": n} {
			if got := counterValue(t, reg, name); got != want {
				t.Errorf("%s %v; want %v", name, got, want)
			}
		}
	})
}

// TestStartHandsFirstBatchOver: Start returns with the first batch in
// asynq's pending list already, so that asynq's processor, whose first
// look comes as it starts, finds work instead of sleeping a PollInterval.
func TestStartHandsFirstBatchOver(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		const n = 50
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: "t", Type: "noop"}); err != nil {
				t.Fatal(err)
			}
		}
		release := make(chan struct{})
		h := HandlerFunc(func(ctx context.Context, _ *Job) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
		// Concurrency 2: a Prefetch of 6. Jobs block in their handler, so
		// no more than 2 start and the dispatcher can add no more than 2.
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2}, h)
		waiting, err := p.TenantDepth(context.Background(), "t")
		t.Cleanup(func() { close(release) }) // before the Shutdown startServer registered
		if err != nil {
			t.Fatal(err)
		}
		if waiting > n-6 {
			t.Fatalf("right after Start, %d of %d jobs still wait in the room; want the first batch of 6 handed over", waiting, n)
		}
	})
}

// counterValue returns the value of the counter name in reg: its one
// series, or, given label pairs ("result", "claimed", ...), the series
// with those labels (0 when none has been counted yet).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(labels) == 0 && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			if len(labels) > 0 {
				return m.GetCounter().GetValue()
			}
		}
	}
	if len(labels) > 0 {
		return 0
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestUndecodableEntryArchived: text in a tenant's list that is no entry
// (nothing a Producer writes: JSON, a task message without the header,
// headers that point past the end or at a task id that is not sluice's)
// does not block the claims behind it, whether the claim shows each job
// to the dispatcher (a server with a throttle) or pops a batch at once
// (without). The dispatcher hands it over as a task of type
// sluice.undecodable with the text as its payload, the worker cannot
// decode it, and asynq archives it, where asynqmon shows it. So does an
// entry whose envelope the worker cannot read. The jobs around them run,
// and the counts end at zero.
func TestUndecodableEntryArchived(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, withThrottle := range []bool{true, false} {
			t.Run(fmt.Sprintf("throttle=%v", withThrottle), func(t *testing.T) {
				testUndecodableEntryArchived(t, client, withThrottle)
			})
		}
	})
}

func testUndecodableEntryArchived(t *testing.T, client redis.UniversalClient, withThrottle bool) {
	ctx := context.Background()
	cfg, p := testProducer(t, client, 100)
	k := p.shards[0]
	_, list, _ := k.tenant("a")
	// An entry the claim reads whose envelope has no tenant: with a
	// throttle, the dispatcher cannot read it to check the downstream it
	// names, and takes it unchecked.
	noTenant := `{"id":"no-tenant","type":"x","downstream":"api"}`
	// An entry as sluice wrote them before v2, asynq's task inside, is
	// refused (errOldEntry).
	old := "sluice/1\tclass=x\ttask=sluice:=a/old@00:0\n\x0a\x01x\x12\x02{}"
	noTenantTask := "sluice:no-tenant@00:0"
	// The text of an entry whose envelope is no job's is handed over as
	// it is (taskOf), the others whole (handOverUndecodable).
	noJob := []string{"msg", noTenant}
	bad := []string{"not json", `{"id":"a","tenant":"a","type":"x"}`, `[1,2]`,
		"\x0a", "\x0a\x01x\x12\x02{}\x1a\x0bsluice:a@b:0", old,
		"sluice/2\tclass=x\ttask=sluice:ab\nmsg", "sluice/2\tclass=x\ttask=sluice:@bc\nmsg",
		"sluice/2\tclass=\ttask=sluice:a@b:0\nmsg", "sluice/2\ttask=sluice:a@b:0\nmsg",
		"sluice/2\tclass=x\nmsg", "sluice/2\tclass=x\ttask=sluice:a@b:0", "sluice/3\tclass=x\ttask=sluice:a@b:0\nmsg",
		"sluice/2class=x\ttask=sluice:a@b:0\nmsg", "sluice/2\tclass=x\tmytask=sluice:a@b:0\nmsg",
		"sluice/2\tclass=x\ttask=sluice:a@b:0\n" + noJob[0], entry(defaultClass, "api", noTenantTask, 1, []byte(noJob[1]))}
	want := append(bad[:len(bad)-2:len(bad)-2], noJob...)
	if _, err := p.Enqueue(ctx, Job{ID: "before", Tenant: "a", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	// What an enqueue would have counted for them (the default class is
	// the depth less the other classes).
	pipe := client.TxPipeline()
	for _, b := range bad {
		pipe.RPush(ctx, list, b)
		pipe.HIncrBy(ctx, k.meta, "depth", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, Job{ID: "after", Tenant: "a", Type: "x"}); err != nil {
		t.Fatal(err)
	}
	scfg := ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2}
	if withThrottle {
		th := testThrottle(t, client, nil)
		scfg.Throttle = th
		scfg.Downstreams = func(name string) (Downstream, bool) {
			return Downstream{Limit: throttle.Limit{Rate: 100}}, name == "api"
		}
	}
	rec := newRecorder()
	startServer(t, client, scfg, rec)
	ins := asynq.NewInspectorFromRedisClient(client)
	waitFor(t, 20*time.Second, "both jobs to run and the undecodable ones to be archived", func() bool {
		archived, err := ins.ListArchivedTasks(cfg.Queue)
		return rec.count() == 2 && err == nil && len(archived) == len(bad)
	})
	archived, err := ins.ListArchivedTasks(cfg.Queue)
	if err != nil {
		t.Fatal(err)
	}
	payloads := map[string]bool{}
	for _, ti := range archived {
		payloads[string(ti.Payload)] = true
		if !strings.HasPrefix(ti.ID, "sluice:") || ti.LastErr == "" {
			t.Errorf("archived task %s (type %s, error %q)", ti.ID, ti.Type, ti.LastErr)
		}
		if ti.Type != undecodableType {
			t.Errorf("archived task %s of type %s; want %s", ti.ID, ti.Type, undecodableType)
		}
	}
	for _, w := range want {
		if !payloads[w] {
			t.Errorf("%q is not among the archived tasks' payloads", w)
		}
	}
	waitFor(t, 5*time.Second, "the counts to reach zero", func() bool {
		st, err := p.Stats(ctx)
		return err == nil && st.Depth == 0 && st.HandedOver == 0 && len(st.ByClass) == 0
	})
}

// TestPutBackJobRunsAgain: a job its handler reschedules goes back to the
// waiting room as an entry (Job.item) and runs again, with its payload.
func TestPutBackJobRunsAgain(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg, p := testProducer(t, client, 100)
		_, list, _ := p.shards[0].tenant("a")
		for _, id := range []string{"first", "moved"} {
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: "a", Type: "x", Payload: []byte("payload of " + id)}); err != nil {
				t.Fatal(err)
			}
		}
		entry, err := client.LIndex(ctx, list, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if j, err := decodeItem(entry); err != nil || j.ID != "moved" || string(j.Payload) != "payload of moved" {
			t.Fatalf("decodeItem: %+v, %v", j, err)
		}
		rec := newRecorder()
		moved := false
		rec.err = func(j *Job) error {
			if j.ID == "moved" && !moved {
				moved = true
				return Reschedule(time.Millisecond, "test")
			}
			return nil
		}
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, PollInterval: 10 * time.Millisecond, ShutdownTimeout: 5 * time.Second}, rec)
		waitFor(t, 10*time.Second, "both jobs to run", func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			return rec.runs["first"] == 1 && rec.runs["moved"] == 2
		})
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, j := range rec.order {
			if string(j.Payload) != "payload of "+j.ID {
				t.Errorf("job %s ran with payload %q", j.ID, j.Payload)
			}
		}
	})
}
