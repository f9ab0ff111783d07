package queue

// Job ids: a job whose id is in the queue (waiting, or handed over and not
// started) is refused with a *DuplicateJobError, in the enqueue script
// itself and writing nothing; once its handler has started the id may be
// used again, and the new job runs on its own even while asynq still holds
// the first one's task.

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/scripts"
)

// roomKeys lists every key of p's waiting room that an enqueue for tenants
// may write, admission state under algs included.
func roomKeys(p *Producer, tenants []string, algs ...algorithms.Algorithm) []string {
	k := p.keys
	keys := []string{k.meta, k.cdepth, k.ring, k.members, k.weights, k.turns, k.sleep, k.handover, k.ids}
	for _, tenant := range tenants {
		enc, list, _ := k.tenant(tenant)
		keys = append(keys, list, k.admission("none", enc))
		for _, alg := range algs {
			keys = append(keys, k.admission(string(alg), enc))
		}
	}
	return keys
}

// wantDuplicate fails t unless err is the *DuplicateJobError of id in cfg's
// queue.
func wantDuplicate(t *testing.T, err error, cfg Config, id string) {
	t.Helper()
	var dup *DuplicateJobError
	if !errors.As(err, &dup) || !errors.Is(err, ErrDuplicateJob) || dup.ID != id || dup.Queue != cfg.Queue {
		t.Fatalf("enqueue of id %q: %v; want a DuplicateJobError naming it", id, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
		t.Fatalf("error %q does not name the id", err)
	}
}

// idCount returns how many jobs the waiting room counts under id (0 when
// the id is not in the queue), once jobs that asynq gave to a worker have
// been counted out.
func idCount(t *testing.T, client redis.UniversalClient, p *Producer, id string) int64 {
	t.Helper()
	if _, err := reconcile(context.Background(), client, p.keys); err != nil {
		t.Fatal(err)
	}
	n, err := client.HGet(context.Background(), p.keys.ids, id).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// TestDuplicateIDRefused: a second job with an id in the queue is refused
// whatever its tenant or payload, before the bound (a full queue still
// answers "duplicate") and before admission (a rate-limited tenant spends
// nothing), and no key changes.
func TestDuplicateIDRefused(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 2)
		pol := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: 5, Period: time.Minute}
		cfg.Tenants = func(tenant string) TenantPolicy {
			if tenant == "limited" {
				return TenantPolicy{Admission: &pol, Class: "gold", Weight: 3}
			}
			return TenantPolicy{}
		}
		p, err := NewProducer(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		r, err := p.Enqueue(ctx, Job{ID: "order-1", Tenant: "acme", Type: "x", Payload: []byte("first")})
		if err != nil || r.ID != "order-1" || r.Depth != 1 {
			t.Fatalf("first job: %+v, %v", r, err)
		}
		keys := roomKeys(p, []string{"acme", "limited"}, pol.Algorithm)
		before := snapshotKeys(t, client, keys)
		for _, job := range []Job{
			{ID: "order-1", Tenant: "acme", Type: "x", Payload: []byte("first")},
			{ID: "order-1", Tenant: "acme", Type: "y", Payload: []byte("second"), Downstream: "api", Cost: 3},
			{ID: "order-1", Tenant: "limited", Type: "x"},
		} {
			_, err := p.Enqueue(ctx, job)
			wantDuplicate(t, err, cfg, "order-1")
		}
		if after := snapshotKeys(t, client, keys); after != before {
			t.Fatalf("a refused duplicate changed Redis:\n%s---\n%s", before, after)
		}

		// A full queue: a duplicate still says so; a new id is refused
		// for the bound.
		if _, err := p.Enqueue(ctx, Job{ID: "order-2", Tenant: "limited", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		before = snapshotKeys(t, client, keys)
		for _, id := range []string{"order-1", "order-2"} {
			for _, tenant := range []string{"acme", "limited"} {
				_, err := p.Enqueue(ctx, Job{ID: id, Tenant: tenant, Type: "x"})
				wantDuplicate(t, err, cfg, id)
			}
		}
		var qf *QueueFullError
		if _, err := p.Enqueue(ctx, Job{ID: "order-3", Tenant: "acme", Type: "x"}); !errors.As(err, &qf) {
			t.Fatalf("a new id in a full queue: %v; want QueueFullError", err)
		}
		if after := snapshotKeys(t, client, keys); after != before {
			t.Fatalf("refusals in a full queue changed Redis:\n%s---\n%s", before, after)
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 2 || st.Tenants != 2 {
			t.Fatalf("stats %+v, %v; want depth 2 for 2 tenants", st, err)
		}
		if idCount(t, client, p, "order-1") != 1 || idCount(t, client, p, "order-2") != 1 {
			t.Fatal("each id in the queue must be counted once")
		}
	})
}

// TestDuplicateIDConcurrentProducers: separate producers sending the same
// ids at the same moment: exactly one job per id gets in.
func TestDuplicateIDConcurrentProducers(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 1000)
		const ids, senders = 20, 8
		producers := make([]*Producer, senders)
		for i := range producers {
			p, err := NewProducer(client, cfg)
			if err != nil {
				t.Fatal(err)
			}
			producers[i] = p
		}
		var accepted [ids]atomic.Int64
		var refused atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for s := range senders {
			for i := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					id := fmt.Sprintf("same-%02d", i)
					_, err := producers[s].Enqueue(context.Background(), Job{ID: id, Tenant: fmt.Sprintf("t%d", s%3), Type: "x", Payload: []byte(fmt.Sprint(s))})
					var dup *DuplicateJobError
					switch {
					case err == nil:
						accepted[i].Add(1)
					case errors.As(err, &dup) && dup.ID == id:
						refused.Add(1)
					default:
						t.Error(err)
					}
				}()
			}
		}
		close(start)
		wg.Wait()
		for i := range accepted {
			if n := accepted[i].Load(); n != 1 {
				t.Errorf("id same-%02d: %d jobs accepted; want exactly 1", i, n)
			}
		}
		if refused.Load() != ids*(senders-1) {
			t.Errorf("%d refused; want %d", refused.Load(), ids*(senders-1))
		}
		st, err := producers[0].Stats(context.Background())
		if err != nil || st.Depth != ids {
			t.Fatalf("stats %+v, %v; want depth %d", st, err, ids)
		}
		if n, err := client.HLen(context.Background(), producers[0].keys.ids).Result(); err != nil || n != ids {
			t.Fatalf("%d ids recorded (%v); want %d", n, err, ids)
		}
	})
}

// TestDuplicateIDDrained is the reported bug: two enqueues of one id while
// a server drains. The second is refused; every accepted job runs once,
// with its own payload, and the queue ends empty with no count left over.
// Then the id is used again after its job completed, while asynq still
// keeps that job's completed task (Retention): the new job is accepted and
// runs, under a task id of its own.
func TestDuplicateIDDrained(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		cfg.TenantBound = 10
		p, err := NewProducer(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("first")}); err != nil {
			t.Fatal(err)
		}
		_, err = p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("second")})
		wantDuplicate(t, err, cfg, "same")
		for i := range 4 {
			if _, err := p.Enqueue(ctx, Job{ID: fmt.Sprintf("other-%d", i), Tenant: "a", Type: "x", Payload: []byte("other")}); err != nil {
				t.Fatal(err)
			}
		}
		if st, _ := p.Stats(ctx); st.Depth != 5 {
			t.Fatalf("depth %d, want 5", st.Depth)
		}
		rec := newRecorder()
		startServer(t, client, ServerConfig{Config: cfg, Concurrency: 2, Retention: time.Hour}, rec)
		empty := func() bool {
			st, err := p.Stats(ctx)
			td, err2 := p.TenantDepth(ctx, "a")
			n, err3 := client.Exists(ctx, p.keys.ids, p.keys.handover).Result()
			return err == nil && err2 == nil && err3 == nil && st.Depth == 0 && st.HandedOver == 0 && len(st.ByClass) == 0 && td == 0 && n == 0
		}
		waitFor(t, 20*time.Second, "5 jobs to run and the queue to empty", func() bool { return rec.count() >= 5 && empty() })
		rec.mu.Lock()
		for _, id := range []string{"same", "other-0", "other-1", "other-2", "other-3"} {
			if rec.runs[id] != 1 {
				t.Errorf("job %s ran %d times; want once", id, rec.runs[id])
			}
		}
		if len(rec.order) != 5 {
			t.Errorf("%d runs; want 5", len(rec.order))
		}
		for _, j := range rec.order {
			if j.ID == "same" && string(j.Payload) != "first" {
				t.Errorf("job same ran with payload %q; want the accepted one's", j.Payload)
			}
		}
		rec.mu.Unlock()

		// asynq remembers the completed task for an hour.
		ins := asynq.NewInspectorFromRedisClient(client)
		completed := func() []string {
			var ids []string
			tasks, err := ins.ListCompletedTasks(cfg.Queue, asynq.PageSize(100))
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range tasks {
				if strings.HasPrefix(ti.ID, "sluice:same@") {
					ids = append(ids, ti.ID)
				}
			}
			return ids
		}
		waitFor(t, 5*time.Second, "asynq to record the task completed", func() bool { return len(completed()) == 1 })
		first := completed()[0]

		// The id again, after its job completed.
		r, err := p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("third")})
		if err != nil || r.ID != "same" {
			t.Fatalf("the id again after its job completed: %+v, %v; want accepted", r, err)
		}
		waitFor(t, 20*time.Second, "the reused id's job to run", func() bool { return rec.count() >= 6 && empty() })
		rec.mu.Lock()
		if last := rec.order[len(rec.order)-1]; last.ID != "same" || string(last.Payload) != "third" || rec.runs["same"] != 2 {
			t.Errorf("last run %s %q, job same ran %d times; want the third payload, twice in all", last.ID, last.Payload, rec.runs["same"])
		}
		rec.mu.Unlock()
		waitFor(t, 5*time.Second, "asynq to record both tasks completed", func() bool { return len(completed()) == 2 })
		if c := completed(); c[0] == c[1] || (c[0] != first && c[1] != first) {
			t.Fatalf("completed tasks %q; want the first one's and a new one", c)
		}
	})
}

// fakeClock is a Config.Clock that tests move forward.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// TestDuplicateIDReusedWhileRunning: while a job runs, its id may be used
// again; the new job is refused a twin while it waits or is handed over.
// When the running job is put back (a 429: Reschedule), its id is in the
// queue again, counted apart from the other job's: after the other starts,
// the id is still refused until the put-back job has started too.
func TestDuplicateIDReusedWhileRunning(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		clock := &fakeClock{}
		cfg.Clock = clock.now
		p, err := NewProducer(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("first")}); err != nil {
			t.Fatal(err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		runs := map[string]int{}
		ran := func(payload string) int {
			mu.Lock()
			defer mu.Unlock()
			return runs[payload]
		}
		// One worker and a prefetch of one: while the first job runs, the
		// second is handed over and waits for the worker.
		startServer(t, client, ServerConfig{Config: cfg, Concurrency: 1, Prefetch: 1}, HandlerFunc(func(ctx context.Context, j *Job) error {
			mu.Lock()
			runs[string(j.Payload)]++
			n := runs[string(j.Payload)]
			mu.Unlock()
			if string(j.Payload) == "first" && n == 1 {
				close(started)
				<-release
				return Reschedule(time.Minute, "429")
			}
			return nil
		}))
		<-started
		if n := idCount(t, client, p, "same"); n != 0 {
			t.Fatalf("a running job's id counted %d times; want 0", n)
		}
		if _, err := p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("second")}); err != nil {
			t.Fatalf("the id of a running job: %v; want accepted", err)
		}
		waitFor(t, 10*time.Second, "the second job to be handed over", func() bool {
			st, err := p.Stats(ctx)
			return err == nil && st.HandedOver == 1 && st.Depth == 1
		})
		_, err = p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("third")})
		wantDuplicate(t, err, cfg, "same")

		// The first job is put back for a minute; the second runs.
		close(release)
		waitFor(t, 10*time.Second, "the second job to run and the first to wait", func() bool {
			st, err := p.Stats(ctx)
			return ran("second") == 1 && err == nil && st.Depth == 1 && st.HandedOver == 0 && st.Sleeping == 1
		})
		if n := idCount(t, client, p, "same"); n != 1 {
			t.Fatalf("the put-back job's id counted %d times; want 1", n)
		}
		// Back in the waiting room: in its tenant's backlog and its class.
		if st, err := p.Stats(ctx); err != nil || st.ByClass["default"] != 1 || len(st.ByClass) != 1 {
			t.Fatalf("classes %v, %v; want the put-back job waiting in class default", st.ByClass, err)
		}
		if td, err := p.TenantDepth(ctx, "a"); err != nil || td != 1 {
			t.Fatalf("tenant depth %d, %v; want the put-back job", td, err)
		}
		_, err = p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("fourth")})
		wantDuplicate(t, err, cfg, "same")

		// A minute later the first job runs again, and the id is free.
		clock.advance(2 * time.Minute)
		waitFor(t, 10*time.Second, "the first job to run again and the queue to empty", func() bool {
			st, err := p.Stats(ctx)
			n, err2 := client.Exists(ctx, p.keys.ids).Result()
			return ran("first") == 2 && err == nil && err2 == nil && st.Depth == 0 && st.HandedOver == 0 && n == 0 && len(st.ByClass) == 0
		})
		if ran("second") != 1 || ran("third") != 0 || ran("fourth") != 0 {
			t.Fatalf("runs %v; want first twice (put back once), second once, no others", runs)
		}
	})
}

// TestReconcileByTaskState: a handed-over job leaves the depth when asynq
// has given its task to a worker, or when the task is gone or archived (an
// operator deleted or archived it in asynqmon), oldest first: the count
// stops at the oldest task still pending, the one asynq gives out next.
// Enqueue counts them out before it refuses a job for a full queue or an
// id in the queue.
func TestReconcileByTaskState(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg, p := testProducer(t, client, 4)
		ctx := context.Background()
		ids := []string{"j0", "j1", "j2", "j3"}
		// Hand all four over without a worker.
		_, entries := handOverAll(t, client, cfg, p, ids...)
		task := map[string]string{} // job id -> asynq task id
		for i, entry := range entries {
			f := strings.Fields(entry)
			if len(f) != 2 || f[1] != ids[i] || !regexp.MustCompile(`^sluice:`+ids[i]+`@[0-9a-f]{16}:0$`).MatchString(f[0]) {
				t.Fatalf("entry %d: %q; want <task id> <id> of job %s, in the order of the hand-over", i, entry, ids[i])
			}
			task[ids[i]] = f[0]
		}
		pending, err := client.LRange(ctx, p.keys.asynqPending, 0, -1).Result()
		if err != nil || !slices.Equal(pending, []string{task["j3"], task["j2"], task["j1"], task["j0"]}) {
			t.Fatalf("asynq's pending list %q, %v; want the tasks pushed in the order of the jobs", pending, err)
		}
		// Handed over, they are in the queue's depth, but no longer in
		// their tenant's backlog or their class's count of waiting jobs.
		if st, err := p.Stats(ctx); err != nil || st.Depth != 4 || st.HandedOver != 4 || len(st.ByClass) != 0 || st.Tenants != 0 {
			t.Fatalf("stats after the hand-over %+v, %v; want depth 4, 4 handed over, no class, no tenant waiting", st, err)
		}
		if td, err := p.TenantDepth(ctx, "a"); err != nil || td != 0 {
			t.Fatalf("tenant depth after the hand-over %d, %v; want 0", td, err)
		}
		counts := func() (depth int64, handed int64) {
			t.Helper()
			st, err := p.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st.Depth, st.HandedOver
		}
		setState := func(id, state string) {
			t.Helper()
			if err := client.HSet(ctx, p.keys.asynqTask+task[id], "state", state).Err(); err != nil {
				t.Fatal(err)
			}
		}
		// j1 given out before j0 (which asynq never does): nothing counts
		// out while the oldest is pending.
		setState("j1", "active")
		if d, h := counts(); d != 4 || h != 4 {
			t.Fatalf("depth %d, handed over %d; want 4 and 4 while the oldest task is pending", d, h)
		}
		_, err = p.Enqueue(ctx, Job{ID: "j4", Tenant: "a", Type: "x"})
		if !errors.Is(err, ErrQueueFull) {
			t.Fatalf("enqueue into a full queue: %v; want ErrQueueFull", err)
		}
		// j0 taken by a worker, j2 archived, j3 deleted: Enqueue counts them
		// out before it looks at the bound, and at the ids.
		setState("j0", "active")
		// The running dispatcher lists the queue for asynq; this test's
		// calls to dispatchOne do not.
		if err := client.SAdd(ctx, "asynq:queues", cfg.Queue).Err(); err != nil {
			t.Fatal(err)
		}
		ins := asynq.NewInspectorFromRedisClient(client)
		if err := ins.ArchiveTask(cfg.Queue, task["j2"]); err != nil {
			t.Fatal(err)
		}
		if err := ins.DeleteTask(cfg.Queue, task["j3"]); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(ctx, Job{ID: "j0", Tenant: "a", Type: "x"}); err != nil {
			t.Fatalf("the id of a job asynq gave to a worker: %v; want accepted", err)
		}
		if d, h := counts(); d != 1 || h != 0 {
			t.Fatalf("depth %d, handed over %d; want 1 (the new j0) and 0", d, h)
		}
		for _, id := range ids {
			if n, want := idCount(t, client, p, id), int64(map[string]int{"j0": 1}[id]); n != want {
				t.Errorf("id %s counted %d times; want %d", id, n, want)
			}
		}
		if td, err := p.TenantDepth(ctx, "a"); err != nil || td != 1 {
			t.Fatalf("tenant depth %d, %v; want 1", td, err)
		}
		if n, err := client.Exists(ctx, p.keys.handover).Result(); err != nil || n != 0 {
			t.Fatalf("%d handed-over keys left, %v; want none", n, err)
		}
	})
}

// TestEnvelopeWithoutNonce: a job enqueued before nonces existed (its
// envelope has none, its key is its bare id, and no id was recorded for
// it) is drained as before and leaves no count behind.
func TestEnvelopeWithoutNonce(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		p, err := NewProducer(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		old := Job{ID: "old-1", Tenant: "a", Type: "x", Payload: []byte("old"), EnqueuedAt: time.Now().UTC(), Class: "default"}
		env, err := old.encode()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(env, "nonce") {
			t.Fatalf("envelope %s", env)
		}
		// What the enqueue script wrote then.
		k := p.keys
		enc, list, _ := k.tenant("a")
		pipe := client.TxPipeline()
		pipe.RPush(ctx, list, env)
		pipe.SAdd(ctx, k.members, enc)
		pipe.RPush(ctx, k.ring, enc)
		pipe.HIncrBy(ctx, k.meta, "depth", 1)
		pipe.HIncrBy(ctx, k.cdepth, "default", 1)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		// The claim hands it over under its bare id.
		v, err := scripts.QueueClaim.Run(ctx, client,
			[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.handover, k.meta, k.cdepth, k.ids, k.asynqPending},
			10, k.tenantPrefix, "", 32, "0", k.asynqTask, cfg.Queue, 3600).Slice()
		if err != nil || len(v) != 3 || v[0] != int64(3) || v[1] != int64(1) {
			t.Fatalf("claim: %v, %v; want one job handed over", v, err)
		}
		if entries, err := client.LRange(ctx, k.handover, 0, -1).Result(); err != nil || len(entries) != 1 || entries[0] != "sluice:old-1:0 old-1" {
			t.Fatalf("handed over: %q, %v; want the bare id's task", entries, err)
		}
		if n, err := client.Exists(ctx, k.asynqTask+"sluice:old-1:0").Result(); err != nil || n != 1 {
			t.Fatalf("asynq task sluice:old-1:0: %d, %v; want it", n, err)
		}
		rec := newRecorder()
		startServer(t, client, ServerConfig{Config: cfg, Concurrency: 1}, rec)
		waitFor(t, 10*time.Second, "the old job to run and the queue to empty", func() bool {
			st, err := p.Stats(ctx)
			n, err2 := client.Exists(ctx, k.ids, k.handover).Result()
			return rec.count() == 1 && err == nil && err2 == nil && st.Depth == 0 && st.HandedOver == 0 && n == 0
		})
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if j := rec.order[0]; j.ID != "old-1" || j.Nonce != "" || string(j.Payload) != "old" {
			t.Fatalf("ran %+v", j)
		}
	})
}
