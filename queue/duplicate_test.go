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
	"github.com/sluicehq/sluice/throttle"
)

// roomKeys lists every key of p's waiting room that an enqueue for tenants
// may write, admission state under algs included.
func roomKeys(p *Producer, tenants []string, algs ...algorithms.Algorithm) []string {
	k := p.shards[0]
	keys := []string{k.meta, k.cdepth, k.ring, k.members, k.weights, k.turns, k.sleep, k.ids, k.asynqPending}
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

// idCount returns how many jobs the waiting room counts under tenant's id
// (0 when no job of it is waiting).
func idCount(t *testing.T, client redis.UniversalClient, p *Producer, tenant, id string) int64 {
	t.Helper()
	n, err := client.HGet(context.Background(), p.shards[0].ids, (&Job{Tenant: tenant, ID: id}).ScopedID()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// TestDuplicateIDRefused: a second job of a tenant with an id that tenant
// has in the queue is refused whatever its payload, before the bound (a
// full queue still answers "duplicate") and before admission (a
// rate-limited tenant spends nothing), and no key changes. Another
// tenant's job of the same id is its own (TestIDsScopedByTenant).
func TestDuplicateIDRefused(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 3)
		pol := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: 5, Period: time.Minute}
		cfg.Tenants = func(tenant string) TenantPolicy {
			if tenant == "limited" {
				return TenantPolicy{Admission: &pol, Class: "gold", Weight: 3}
			}
			return TenantPolicy{}
		}
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		r, err := p.Enqueue(ctx, Job{ID: "order-1", Tenant: "acme", Type: "x", Payload: []byte("first")})
		if err != nil || r.ID != "order-1" || r.Depth != 1 {
			t.Fatalf("first job: %+v, %v", r, err)
		}
		r, err = p.Enqueue(ctx, Job{ID: "order-1", Tenant: "limited", Type: "x"})
		if err != nil || r.ID != "order-1" || r.Depth != 2 {
			t.Fatalf("the other tenant's job of the id: %+v, %v; want it accepted", r, err)
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

		// A full queue: a duplicate still says so; an id new to its
		// tenant is refused for the bound.
		if _, err := p.Enqueue(ctx, Job{ID: "order-2", Tenant: "limited", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		before = snapshotKeys(t, client, keys)
		for _, job := range []Job{
			{ID: "order-1", Tenant: "acme", Type: "x"},
			{ID: "order-1", Tenant: "limited", Type: "x"},
			{ID: "order-2", Tenant: "limited", Type: "x"},
		} {
			_, err := p.Enqueue(ctx, job)
			wantDuplicate(t, err, cfg, job.ID)
		}
		var qf *QueueFullError
		for _, job := range []Job{{ID: "order-3", Tenant: "acme", Type: "x"}, {ID: "order-2", Tenant: "acme", Type: "x"}} {
			if _, err := p.Enqueue(ctx, job); !errors.As(err, &qf) {
				t.Fatalf("%+v in a full queue: %v; want QueueFullError", job, err)
			}
		}
		if after := snapshotKeys(t, client, keys); after != before {
			t.Fatalf("refusals in a full queue changed Redis:\n%s---\n%s", before, after)
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 3 || st.Tenants != 2 {
			t.Fatalf("stats %+v, %v; want depth 3 for 2 tenants", st, err)
		}
		for _, c := range []struct {
			tenant, id string
			want       int64
		}{{"acme", "order-1", 1}, {"limited", "order-1", 1}, {"limited", "order-2", 1}, {"acme", "order-2", 0}} {
			if n := idCount(t, client, p, c.tenant, c.id); n != c.want {
				t.Errorf("tenant %s's id %s counted %d times; want %d", c.tenant, c.id, n, c.want)
			}
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
			p, err := NewProducer(client, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			producers[i] = p
		}
		const tenants = 3 // sender s sends as tenant s%tenants
		var accepted [ids][tenants]atomic.Int64
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
					_, err := producers[s].Enqueue(context.Background(), Job{ID: id, Tenant: fmt.Sprintf("t%d", s%tenants), Type: "x", Payload: []byte(fmt.Sprint(s))})
					var dup *DuplicateJobError
					switch {
					case err == nil:
						accepted[i][s%tenants].Add(1)
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
			for tn := range accepted[i] {
				if n := accepted[i][tn].Load(); n != 1 {
					t.Errorf("id same-%02d of tenant t%d: %d jobs accepted; want exactly 1", i, tn, n)
				}
			}
		}
		if refused.Load() != ids*(senders-tenants) {
			t.Errorf("%d refused; want %d", refused.Load(), ids*(senders-tenants))
		}
		st, err := producers[0].Stats(context.Background())
		if err != nil || st.Depth != ids*tenants {
			t.Fatalf("stats %+v, %v; want depth %d", st, err, ids*tenants)
		}
		if n, err := client.HLen(context.Background(), producers[0].shards[0].ids).Result(); err != nil || n != ids*tenants {
			t.Fatalf("%d ids recorded (%v); want %d", n, err, ids*tenants)
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
		p, err := NewProducer(client, &cfg)
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
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Retention: time.Hour}, rec)
		empty := func() bool {
			st, err := p.Stats(ctx)
			td, err2 := p.TenantDepth(ctx, "a")
			n, err3 := client.Exists(ctx, p.shards[0].ids).Result()
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
				if strings.HasPrefix(ti.ID, "sluice:=a/same@") {
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

// fakeClock is a Config.clock that tests move forward.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// TestDuplicateIDReusedWhileRunning: once a job has started its id may be
// used again, while it runs; a job of the id handed over and waiting for
// a worker in asynq's pending list is refused a twin. When the running
// job is put back (a 429: Reschedule), its id is in the room again: the
// id is refused until it has started again.
func TestDuplicateIDReusedWhileRunning(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 100)
		clock := &fakeClock{}
		cfg.clock = clock.now
		p, err := NewProducer(client, &cfg)
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
		// second is handed over and waits for the worker, and the third
		// waits in the room.
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Prefetch: 1}, HandlerFunc(func(ctx context.Context, j *Job) error {
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
		if n := idCount(t, client, p, "a", "same"); n != 0 {
			t.Fatalf("a running job's id counted %d times; want 0", n)
		}
		if _, err := p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("second")}); err != nil {
			t.Fatalf("the id of a running job: %v; want accepted", err)
		}
		waitFor(t, 10*time.Second, "the second job to be handed over", func() bool {
			st, err := p.Stats(ctx)
			return err == nil && st.HandedOver == 1 && st.Depth == 1
		})
		if n := idCount(t, client, p, "a", "same"); n != 0 {
			t.Fatalf("a handed-over job's id counted %d times; want 0 (held, not waiting)", n)
		}
		_, err = p.Enqueue(ctx, Job{ID: "same", Tenant: "a", Type: "x", Payload: []byte("third")})
		wantDuplicate(t, err, cfg, "same")

		// The first job is put back for a minute, its tenant asleep; the
		// second runs.
		close(release)
		waitFor(t, 10*time.Second, "the second job to run and the first to wait", func() bool {
			st, err := p.Stats(ctx)
			return ran("second") == 1 && err == nil && st.Depth == 1 && st.HandedOver == 0 && st.Sleeping == 1
		})
		if n := idCount(t, client, p, "a", "same"); n != 1 {
			t.Fatalf("the id counted %d times; want once (the put-back first)", n)
		}
		// Back in the waiting room: in its tenant's backlog and its class.
		if st, err := p.Stats(ctx); err != nil || st.ByClass["default"] != 1 || len(st.ByClass) != 1 {
			t.Fatalf("classes %v, %v; want one job waiting in class default", st.ByClass, err)
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
			n, err2 := client.Exists(ctx, p.shards[0].ids, p.shards[0].held).Result()
			return ran("first") == 2 && err == nil && err2 == nil && st.Depth == 0 && st.HandedOver == 0 && n == 0 && len(st.ByClass) == 0
		})
		if ran("second") != 1 || ran("third") != 0 || ran("fourth") != 0 {
			t.Fatalf("runs %v; want first twice (put back once), second once, no third or fourth", runs)
		}
	})
}

// TestBoundCountsAsynqPending: a handed-over job leaves the waiting room's
// counts (its tenant's backlog, its class, its id) and is counted by the
// bound in asynq's pending list until asynq gives it to a worker, or an
// operator archives or deletes it in asynqmon. A task asynq puts back in
// its pending list (an archived task run again, a retry that is due)
// counts again. Its id stays held until it starts, or for idHold when it
// never does (a worker took it and died, an operator archived or deleted
// it).
func TestBoundCountsAsynqPending(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		cfg := testConfig(t, 4)
		clock := &fakeClock{}
		cfg.clock = clock.now
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		ids := []string{"j0", "j1", "j2", "j3"}
		_, tasks := handOverAll(t, client, cfg, p, ids...)
		task := map[string]string{} // job id -> asynq task id
		for i, id := range ids {
			task[id] = tasks[i]
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 4 || st.HandedOver != 4 || len(st.ByClass) != 0 || st.Tenants != 0 {
			t.Fatalf("stats after the hand-over %+v, %v; want depth 4, 4 handed over, no class, no tenant waiting", st, err)
		}
		if td, err := p.TenantDepth(ctx, "a"); err != nil || td != 0 {
			t.Fatalf("tenant depth after the hand-over %d, %v; want 0", td, err)
		}
		if n, err := client.Exists(ctx, p.shards[0].ids).Result(); err != nil || n != 0 {
			t.Fatalf("ids of handed-over jobs: %d, %v; want none", n, err)
		}
		_, err = p.Enqueue(ctx, Job{ID: "j4", Tenant: "a", Type: "x"})
		var full *QueueFullError
		if !errors.As(err, &full) || full.Depth != 4 || full.Bound != 4 {
			t.Fatalf("enqueue into a full queue: %v; want QueueFullError at depth 4", err)
		}
		// asynq gives j0 to a worker (its dequeue: pending to active), an
		// operator archives j2 and deletes j3.
		if err := client.LRem(ctx, p.shards[0].asynqPending, 1, task["j0"]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.HSet(ctx, asynqTaskKey(p.shards[0], task["j0"]), "state", "active").Err(); err != nil {
			t.Fatal(err)
		}
		// The running dispatcher lists the queue for asynq; this test's
		// call to dispatchOne does not.
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
		for _, id := range []string{"j0", "j2"} {
			_, err := p.Enqueue(ctx, Job{ID: id, Tenant: "a", Type: "x"})
			wantDuplicate(t, err, cfg, id)
		}
		clock.advance(idHold + time.Second)
		for _, id := range []string{"j0", "j2"} {
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: "a", Type: "x"}); err != nil {
				t.Fatalf("the id of a job in asynq's hands: %v; want accepted", err)
			}
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 3 || st.HandedOver != 1 {
			t.Fatalf("stats %+v, %v; want depth 3 (j1 pending, new j0 and j2 waiting), 1 handed over", st, err)
		}
		// The archived j2 run again: back in asynq's pending list, it
		// counts, and fills the queue.
		if err := ins.RunTask(cfg.Queue, task["j2"]); err != nil {
			t.Fatal(err)
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 4 || st.HandedOver != 2 {
			t.Fatalf("stats %+v, %v; want depth 4, 2 in asynq's pending list", st, err)
		}
		if _, err := p.Enqueue(ctx, Job{ID: "j5", Tenant: "a", Type: "x"}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("enqueue with a task run again: %v; want ErrQueueFull", err)
		}
		for id, want := range map[string]int64{"j0": 1, "j1": 0, "j2": 1, "j3": 0, "j5": 0} {
			if n := idCount(t, client, p, "a", id); n != want {
				t.Errorf("id %s counted %d times; want %d", id, n, want)
			}
		}
	})
}

// TestChosenIDsNotRecorded: an id the producer chose is not recorded for
// the duplicate check, one the caller set is, and the hand-over leaves the
// ids hash empty either way.
func TestChosenIDsNotRecorded(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg, p := testProducer(t, client, 100)
		var chosen []string
		for _, id := range []string{"", "mine", ""} {
			r, err := p.Enqueue(ctx, Job{ID: id, Tenant: "a", Type: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if id == "" {
				chosen = append(chosen, r.ID)
			}
		}
		ids, err := client.HGetAll(ctx, p.shards[0].ids).Result()
		if err != nil || len(ids) != 1 || ids["=a/mine"] != "1" {
			t.Fatalf("ids hash %v, %v; want only mine, once (chosen ids %q not recorded)", ids, err, chosen)
		}
		wantDuplicate(t, func() error { _, err := p.Enqueue(ctx, Job{ID: "mine", Tenant: "a", Type: "x"}); return err }(), cfg, "mine")
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.dispatchOne(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := client.LLen(ctx, p.shards[0].asynqPending).Result(); err != nil || n != 3 {
			t.Fatalf("pending %d, %v; want the 3 jobs handed over", n, err)
		}
		if n, err := client.Exists(ctx, p.shards[0].ids).Result(); err != nil || n != 0 {
			t.Fatalf("ids hash exists (%d, %v) after every job was handed over", n, err)
		}
	})
}

// TestChosenIDsDistinct: the ids and nonces the producer chooses are hex of
// the asked length and do not repeat, across goroutines too.
func TestChosenIDsDistinct(t *testing.T) {
	const each, workers = 20000, 4
	got := make(chan string, each*workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				got <- randomHex(16) + "@" + randomHex(8)
			}
		}()
	}
	wg.Wait()
	close(got)
	seen := map[string]bool{}
	re := regexp.MustCompile(`^[0-9a-f]{32}@[0-9a-f]{16}$`)
	for s := range got {
		if !re.MatchString(s) {
			t.Fatalf("id@nonce %q; want 32 and 16 hex digits", s)
		}
		id, nonce, _ := strings.Cut(s, "@")
		if seen[id] || seen[nonce] {
			t.Fatalf("%q repeated after %d", s, len(seen)/2)
		}
		seen[id], seen[nonce] = true, true
	}
}

// TestIDsScopedByTenant is issue 19's first finding: tenant mallory's job
// of an id must neither block tenant alice's job of that id, waiting or put
// back, nor share its asynq task: each tenant's jobs run with their own
// payloads, and the task ids name the tenant.
func TestIDsScopedByTenant(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg, p := testProducer(t, client, 100)
		for _, tenant := range []string{"mallory", "alice"} {
			r, err := p.Enqueue(ctx, Job{ID: "order-42", Tenant: tenant, Type: "x", Payload: []byte(tenant)})
			if err != nil || r.ID != "order-42" {
				t.Fatalf("%s's order-42: %+v, %v; want it accepted", tenant, r, err)
			}
		}
		for _, tenant := range []string{"mallory", "alice"} {
			_, err := p.Enqueue(ctx, Job{ID: "order-42", Tenant: tenant, Type: "x", Payload: []byte("again")})
			wantDuplicate(t, err, cfg, "order-42")
			var dup *DuplicateJobError
			if errors.As(err, &dup); dup.Tenant != tenant || !strings.Contains(err.Error(), fmt.Sprintf("%q", tenant)) {
				t.Errorf("%s's duplicate: %v; want it to name the tenant", tenant, err)
			}
		}

		// mallory's job is put back for an hour (its id in the room
		// again); alice's runs.
		type run struct{ tenant, payload, task string }
		var mu sync.Mutex
		var runs []run
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2}, HandlerFunc(func(ctx context.Context, j *Job) error {
			task, _ := asynq.GetTaskID(ctx)
			mu.Lock()
			runs = append(runs, run{j.Tenant, string(j.Payload), task})
			mu.Unlock()
			if j.Tenant == "mallory" {
				return Reschedule(time.Hour, "429")
			}
			return nil
		}))
		got := func() []run {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(runs)
		}
		waitFor(t, 20*time.Second, "both jobs to run and mallory's to be put back", func() bool {
			return len(got()) == 2 && idCount(t, client, p, "mallory", "order-42") == 1
		})
		if n := idCount(t, client, p, "alice", "order-42"); n != 0 {
			t.Fatalf("alice's order-42 counted %d times after it ran", n)
		}
		// mallory's waiting job does not block alice's next order-42.
		if _, err := p.Enqueue(ctx, Job{ID: "order-42", Tenant: "alice", Type: "x", Payload: []byte("alice")}); err != nil {
			t.Fatalf("alice's order-42 while mallory's waits: %v; want it accepted", err)
		}
		waitFor(t, 20*time.Second, "alice's second job to run", func() bool { return len(got()) == 3 })
		_, err := p.Enqueue(ctx, Job{ID: "order-42", Tenant: "mallory", Type: "x"})
		wantDuplicate(t, err, cfg, "order-42")

		seen := map[string]bool{}
		for _, r := range got() {
			if r.payload != r.tenant {
				t.Errorf("a job of tenant %s ran with %s's payload", r.tenant, r.payload)
			}
			if !strings.HasPrefix(r.task, "sluice:="+r.tenant+"/order-42@") || seen[r.task] {
				t.Errorf("tenant %s's job ran as task %q; want its own, naming the tenant", r.tenant, r.task)
			}
			seen[r.task] = true
		}
	})
}

// TestIDHeldUntilStarted: a job handed over to asynq keeps its id taken
// until it starts: an enqueue of the id while it waits in asynq's pending
// list (or for its worker to put it back, its slot too far away) is
// refused. Put back, its id is counted in the waiting room once, the hold
// ended in the same step; a job that starts frees its id. A job whose id
// the queue chose is neither counted nor held, even when put back.
func TestIDHeldUntilStarted(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg, p := testProducer(t, client, 100)
		k := p.shards[0]
		th := testThrottle(t, client, nil)
		api := Downstream{Limit: throttle.Limit{Rate: 100, MaxWait: time.Second}}
		if _, err := th.Pause(ctx, "api", api.Limit, time.Hour); err != nil {
			t.Fatal(err)
		}
		for _, j := range []Job{{ID: "waits", Tenant: "a", Downstream: "api"}, {ID: "runs", Tenant: "b"}, {Tenant: "c"}, {Tenant: "d", Downstream: "api"}} {
			j.Type = "x"
			if _, err := p.Enqueue(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th, ShutdownTimeout: 5 * time.Second,
			Downstreams: func(name string) (Downstream, bool) { return api, name == "api" }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.claim(ctx, s.disp[0]); err != nil {
			t.Fatal(err)
		}
		if st, err := p.Stats(ctx); err != nil || st.HandedOver != 4 {
			t.Fatalf("stats %+v, %v; want the 4 jobs handed over", st, err)
		}
		// Handed over, not started: both ids taken, neither counted in the
		// waiting room.
		for id, tenant := range map[string]string{"waits": "a", "runs": "b"} {
			_, err := p.Enqueue(ctx, Job{ID: id, Tenant: tenant, Type: "x"})
			wantDuplicate(t, err, cfg, id)
		}
		if n, err := client.Exists(ctx, k.ids).Result(); err != nil || n != 0 {
			t.Fatalf("ids hash exists (%d, %v) with every job handed over", n, err)
		}
		if held, err := client.ZRange(ctx, k.held, 0, -1).Result(); err != nil || !slices.Equal(held, []string{"=a/waits", "=b/runs"}) {
			t.Fatalf("held ids %q, %v; want =a/waits and =b/runs", held, err)
		}

		rec := newRecorder()
		if err := s.Start(rec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		waitFor(t, 20*time.Second, "b's and c's jobs to run and a's and d's to be put back", func() bool {
			st, err := p.Stats(ctx)
			return rec.count() == 2 && err == nil && st.Depth == 2 && st.HandedOver == 0 && st.Sleeping == 2
		})
		if ids, err := client.HGetAll(ctx, k.ids).Result(); err != nil || len(ids) != 1 || ids["=a/waits"] != "1" {
			t.Fatalf("ids hash %v, %v; want the put-back =a/waits once (not d's job, whose id the queue chose)", ids, err)
		}
		if n, err := client.Exists(ctx, k.held).Result(); err != nil || n != 0 {
			t.Fatalf("held ids exist (%d, %v) with no job handed over", n, err)
		}
		_, err = p.Enqueue(ctx, Job{ID: "waits", Tenant: "a", Type: "x"})
		wantDuplicate(t, err, cfg, "waits")
		if r, err := p.Enqueue(ctx, Job{ID: "runs", Tenant: "b", Type: "x"}); err != nil || r.ID != "runs" {
			t.Fatalf("the id of a job that started: %+v, %v; want accepted", r, err)
		}
	})
}
