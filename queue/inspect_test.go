package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// pageIDs returns the ids of a page's jobs.
func pageIDs(p Page) []string {
	var ids []string
	for _, j := range p.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestInspectorFindsListsAndEdits: the inspector places a waiting job
// behind the exact number of its tenant's jobs, a job for later at its
// due time; lists both, paged; deletes and cancels with the room's counts
// exact (depth, class counts, ids: a deleted job's id is free again); and
// refuses an edit of a job handed over with a HandedOverError, while it
// reports that job as pending in asynq.
func TestInspectorFindsListsAndEdits(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		clock := &testClock{now: time.Now().Truncate(time.Second)}
		cfg := testConfig(t, 100)
		cfg.clock = clock.Now
		cfg.Tenants = func(string) TenantPolicy { return TenantPolicy{Class: "gold"} }
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range 5 {
			r, err := p.Enqueue(ctx, Job{ID: fmt.Sprintf("j%d", i), Tenant: "acme", Type: "x"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
		for range 3 { // ids the queue chooses
			r, err := p.Enqueue(ctx, Job{Tenant: "acme", Type: "x"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.ID)
		}
		due := clock.Now().Add(10 * time.Second)
		if _, err := p.Enqueue(ctx, Job{ID: "later1", Tenant: "acme", Type: "x", RunAt: due}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(ctx, Job{ID: "j0", Tenant: "other", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		in, err := NewInspector(client, &InspectorConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			info, err := in.Job(ctx, "acme", id)
			if err != nil {
				t.Fatalf("job %s: %v", id, err)
			}
			if info.State != StateWaiting || info.Ahead != int64(i) || !info.AheadExact || info.Backlog != 8 {
				t.Fatalf("job %s: %+v; want waiting behind %d of 8, exactly", id, info, i)
			}
		}
		info, err := in.Job(ctx, "acme", "later1")
		if err != nil || info.State != StateLater || !info.Due.Equal(due) || !info.StartsAt.Equal(due) {
			t.Fatalf("later1: %+v, %v; want later, due %v", info, err, due)
		}
		if _, err := in.Job(ctx, "acme", "nope"); !errors.Is(err, ErrJobNotFound) {
			t.Fatalf("unknown job: %v; want ErrJobNotFound", err)
		}

		// Pages of 3, in the order the jobs will start.
		var listed []string
		cursor := ""
		for pages := 0; ; pages++ {
			pg, err := in.List(ctx, "acme", ListOptions{Cursor: cursor, Limit: 3})
			if err != nil || pg.Total != 8 || len(pg.Jobs) > 3 {
				t.Fatalf("page %q: %+v, %v", cursor, pg, err)
			}
			listed = append(listed, pageIDs(pg)...)
			if cursor = pg.Next; cursor == "" {
				break
			}
		}
		if !slices.Equal(listed, ids) {
			t.Fatalf("listed %v; want %v", listed, ids)
		}
		pg, err := in.List(ctx, "acme", ListOptions{Delayed: true})
		if err != nil || !slices.Equal(pageIDs(pg), []string{"later1"}) || !pg.Jobs[0].Due.Equal(due) || pg.Total != 1 || pg.Next != "" {
			t.Fatalf("delayed: %+v, %v", pg, err)
		}

		// Edits.
		if err := in.Cancel(ctx, "acme", "j0"); !errors.Is(err, ErrNotDelayed) {
			t.Fatalf("cancel of a due job: %v; want ErrNotDelayed", err)
		}
		if err := in.Delete(ctx, "acme", "j1"); err != nil {
			t.Fatal(err)
		}
		if err := in.Cancel(ctx, "acme", "later1"); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Job(ctx, "acme", "j1"); !errors.Is(err, ErrJobNotFound) {
			t.Fatalf("deleted job: %v; want ErrJobNotFound", err)
		}
		if info, err := in.Job(ctx, "acme", "j3"); err != nil || info.Ahead != 2 || !info.AheadExact {
			t.Fatalf("j3 after a delete ahead of it: %+v, %v; want 2 ahead", info, err)
		}
		st, err := p.Stats(ctx)
		if err != nil || st.Depth != 8 || st.Later != 0 || st.ByClass["gold"] != 8 {
			t.Fatalf("stats after the edits %+v, %v; want depth 8, none for later, 8 gold", st, err)
		}
		if n, err := p.TenantDepth(ctx, "acme"); err != nil || n != 7 {
			t.Fatalf("acme's backlog %d, %v; want 7", n, err)
		}
		for _, id := range []string{"j1", "later1"} {
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: "acme", Type: "x"}); err != nil {
				t.Fatalf("enqueue %s again after its removal: %v", id, err)
			}
		}

		// Hand the first jobs over: asynq's now.
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, clock: cfg.clock, Concurrency: 1, Prefetch: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.dispatchOne(ctx); err != nil {
			t.Fatal(err)
		}
		// asynq's Inspector knows the queues asynq lists, as the
		// dispatcher's loop lists its own.
		if err := client.SAdd(ctx, "asynq:queues", s.shards[0].queue).Err(); err != nil {
			t.Fatal(err)
		}
		info, err = in.Job(ctx, "acme", "j0")
		if err != nil || info.State != StatePending {
			t.Fatalf("j0 handed over: %+v, %v; want pending", info, err)
		}
		var ho *HandedOverError
		if err := in.Delete(ctx, "acme", "j0"); !errors.As(err, &ho) || !errors.Is(err, ErrHandedOver) || ho.TaskID != info.TaskID {
			t.Fatalf("delete of a job handed over: %v; want a HandedOverError for task %s", err, info.TaskID)
		}
		// The claim took one job a tenant (the prefetch's room of 2
		// shared over the ring): j2 is ahead of j3 still.
		if info, err := in.Job(ctx, "acme", "j3"); err != nil || info.State != StateWaiting || info.Ahead != 1 || !info.AheadExact {
			t.Fatalf("j3 after j0 and j1 left: %+v, %v; want behind j2 alone", info, err)
		}
		if info, err := in.Job(ctx, "other", "j0"); err != nil || info.State != StatePending {
			t.Fatalf("other's j0: %+v, %v; want pending", info, err)
		}
	})
}

// TestInspectorNamesTheBucket: a job whose downstream's bucket is booked
// ahead is said to wait for that bucket until its next slot, the time the
// throttle itself gives; its tenant's next jobs are estimated at the
// bucket's pace.
func TestInspectorNamesTheBucket(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 100)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		th := testThrottle(t, client, nil)
		lim := throttle.Limit{Rate: 1, Per: 10 * time.Second, MaxWait: time.Hour}
		d := Downstream{Name: "api", Limit: lim}
		for range 3 { // the next slot is 20 s away
			if _, err := th.Reserve(ctx, "api", lim, 1); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 2 {
			if _, err := p.Enqueue(ctx, Job{ID: fmt.Sprint("a", i), Tenant: "acme", Type: "x", Downstream: "api"}); err != nil {
				t.Fatal(err)
			}
		}
		in, err := NewInspector(client, &InspectorConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Throttle: th,
			Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }})
		if err != nil {
			t.Fatal(err)
		}
		info, err := in.Job(ctx, "acme", "a0")
		if err != nil {
			t.Fatal(err)
		}
		peek, err := th.Peek(ctx, "api", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		var bucket *Wait
		for i, w := range info.Waits {
			if w.Kind == "bucket" {
				bucket = &info.Waits[i]
			}
		}
		bk := "api" // the throttle key, which names its bucket
		truth := info.Now.Add(peek.Delay)
		if bucket == nil || bucket.Until.Sub(truth).Abs() > time.Second || !info.StartsAt.Equal(bucket.Until) {
			t.Fatalf("a0: %+v; want a bucket wait until about %v", info, truth)
		}
		if want := "bucket " + bk; !strings.Contains(bucket.Detail, want) || !strings.Contains(info.Why, want) {
			t.Fatalf("a0's wait %q, why %q: want them to name %q", bucket.Detail, info.Why, want)
		}
		next, err := in.Job(ctx, "acme", "a1")
		if err != nil || (next.StartsAt.Sub(info.StartsAt)-10*time.Second).Abs() > 100*time.Millisecond {
			t.Fatalf("a1: %+v, %v; want it 10 s (the pace) after a0 at %v", next, err, info.StartsAt)
		}
	})
}

// TestInspectorForgetsCompletedJobs: a job that ran and succeeded is
// forgotten (its record deleted in the worker's next batch); a job put
// back by its handler is found again under its new task id.
func TestInspectorForgetsCompletedJobs(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 100)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		in, err := NewInspector(client, &InspectorConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan string, 10)
		startServer(t, client, ServerConfig{Queue: cfg.Queue}, HandlerFunc(func(ctx context.Context, j *Job) error {
			if j.ID == "later" && j.moves == 0 {
				return Reschedule(time.Hour, "not yet")
			}
			done <- j.ID
			return nil
		}))
		for _, id := range []string{"ok", "later"} {
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: "acme", Type: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		if got := <-done; got != "ok" {
			t.Fatalf("ran %s", got)
		}
		waitFor(t, 5*time.Second, "ok's record to go", func() bool {
			_, err := in.Job(ctx, "acme", "ok")
			return errors.Is(err, ErrJobNotFound)
		})
		waitFor(t, 5*time.Second, "later to be put back", func() bool {
			info, err := in.Job(ctx, "acme", "later")
			return err == nil && info.State == StateWaiting && info.AheadExact && len(info.Waits) > 0 && info.Waits[0].Kind == "asleep"
		})
		info, _ := in.Job(ctx, "acme", "later")
		if !sameJob(info.TaskID, info.TaskID[:len(info.TaskID)-1]+"0") || info.TaskID[len(info.TaskID)-1] != '1' {
			t.Fatalf("later's task id %s: want its second hand-over's (moves 1)", info.TaskID)
		}
	})
}

// TestInspectorFollowsAsynq: once handed over, a job's state is asynq's,
// read through asynq's Inspector by the task id the record names: a job
// whose handler runs is running, one that failed is retrying (with its
// error and next run), one that failed for good is archived with why.
func TestInspectorFollowsAsynq(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 100)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		in, err := NewInspector(client, &InspectorConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Concurrency: 4}, HandlerFunc(func(ctx context.Context, j *Job) error {
			switch j.ID {
			case "block":
				<-release
			case "fail":
				return errors.New("the API said no")
			case "perm":
				return Permanent(errors.New("bad payload"))
			}
			return nil
		}))
		defer close(release)
		for _, id := range []string{"block", "fail", "perm"} {
			if _, err := p.Enqueue(ctx, Job{ID: id, Tenant: "acme", Type: "x", MaxRetry: 3}); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]JobState{"block": StateRunning, "fail": StateRetrying, "perm": StateArchived}
		for id, state := range want {
			var info JobInfo
			waitFor(t, 10*time.Second, id+" "+string(state), func() bool {
				info, err = in.Job(ctx, "acme", id)
				return err == nil && info.State == state
			})
			switch id {
			case "fail":
				if !strings.Contains(info.LastError, "the API said no") || info.NextRun.IsZero() || !strings.Contains(info.Why, "retrying at") {
					t.Fatalf("fail: %+v", info)
				}
			case "perm":
				if !strings.Contains(info.Why, "archived by asynq: bad payload") {
					t.Fatalf("perm: %+v", info)
				}
			}
		}
		var ho *HandedOverError
		if err := in.Delete(ctx, "acme", "perm"); !errors.As(err, &ho) || !strings.Contains(err.Error(), "asynq's tools") {
			t.Fatalf("delete of an archived job: %v; want a HandedOverError naming asynq's tools", err)
		}
	})
}

// TestInspectorShards: on a queue of several shards, each tenant's jobs
// are found, edited and forgotten in its own shard.
func TestInspectorShards(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 100)
		cfg.Shards = 4
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		in, err := NewInspector(client, &InspectorConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		tenants := []string{"a", "b", "c", "d", "e", "f"}
		for _, tn := range tenants {
			for i := range 3 {
				if _, err := p.Enqueue(ctx, Job{ID: fmt.Sprint("j", i), Tenant: tn, Type: "x"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, tn := range tenants {
			info, err := in.Job(ctx, tn, "j2")
			if err != nil || info.State != StateWaiting || info.Ahead != 2 || !info.AheadExact || info.Queue != p.shards.of(mustEncode(t, tn)).queue {
				t.Fatalf("%s's j2: %+v, %v", tn, info, err)
			}
			if err := in.Delete(ctx, tn, "j0"); err != nil {
				t.Fatal(err)
			}
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 12 {
			t.Fatalf("stats %+v, %v; want 12 left", st, err)
		}
		done := make(chan struct{}, 12)
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Shards: 4}, HandlerFunc(func(context.Context, *Job) error {
			done <- struct{}{}
			return nil
		}))
		for range 12 {
			<-done
		}
		waitFor(t, 5*time.Second, "every record forgotten", func() bool {
			for _, k := range p.shards {
				if n, err := client.HLen(ctx, k.jobs).Result(); err != nil || n > 0 {
					return false
				}
			}
			return true
		})
	})
}
