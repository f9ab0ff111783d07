package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/throttle"
)

// fill enqueues n jobs for tenant from 8 goroutines.
func fill(t *testing.T, p *Producer, tenant string, n int, downstream string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				if _, err := p.Enqueue(context.Background(), Job{Tenant: tenant, Type: "work", Downstream: downstream}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestFairnessBigBacklog: tenant A has 100,000 jobs queued and draining;
// then tenants B to E enqueue 10 each. Every job of B to E starts before A
// has had more than a small multiple of its fair share, and B's first job
// starts behind a bounded number of A's jobs: those already handed to
// asynq when B arrived, and a round or so of the ring. Both bounds count
// jobs, not seconds, so a busy machine cannot break them.
func TestFairnessBigBacklog(t *testing.T) {
	client := redistest.Shared(t)
	cfg := testConfig(t, 200_000)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fill(t, p, "A", 100_000, "")
	t.Logf("enqueued 100,000 jobs for A in %v", time.Since(start))

	var mu sync.Mutex
	var aRuns, othersDone int
	aAtFirstB := -1
	aAtLastOther := 0
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		if j.Tenant == "A" {
			aRuns++
			return nil
		}
		if j.Tenant == "B" && aAtFirstB < 0 {
			aAtFirstB = aRuns
		}
		othersDone++
		aAtLastOther = aRuns
		return nil
	})
	const concurrency = 4
	srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: concurrency}, h)
	waitFor(t, 30*time.Second, "A's backlog to be draining", func() bool { mu.Lock(); defer mu.Unlock(); return aRuns >= 200 })

	// A's jobs that start before B's first count from the moment B's job
	// is in the queue.
	mu.Lock()
	aAtB := aRuns
	mu.Unlock()
	for _, tenant := range []string{"B", "C", "D", "E"} {
		for i := 0; i < 10; i++ {
			if _, err := p.Enqueue(context.Background(), Job{Tenant: tenant, Type: "work"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A's jobs count from the moment all 40 are in the queue: while they
	// were being enqueued one by one, A was still (nearly) alone.
	mu.Lock()
	aBefore := aRuns
	mu.Unlock()
	waitFor(t, 60*time.Second, "the 40 jobs of B to E", func() bool { mu.Lock(); defer mu.Unlock(); return othersDone >= 40 })
	mu.Lock()
	defer mu.Unlock()
	// Round-robin over five tenants: while B to E have work, A gets one
	// turn in five, so about 10 of its jobs run alongside their 40, plus
	// the jobs already handed to asynq (prefetch) when they arrived.
	share := aAtLastOther - aBefore
	prefetch := srv.cfg.Prefetch
	// B's first job waits for the jobs handed to asynq before it (at most
	// the prefetch, plus those the workers hold), for those a claim under
	// way when it arrived hands over (at most the prefetch again), and
	// for A's turn in the ring: a few.
	ahead := aAtFirstB - aAtB
	t.Logf("A ran %d jobs while B to E ran their 40 (fair share 10, prefetch %d); %d of A's jobs started between B's enqueue and B's first start",
		share, prefetch, ahead)
	if share > 3*10+prefetch {
		t.Fatalf("A ran %d jobs while B to E ran 40: more than 3x its fair share of 10 plus the prefetch of %d", share, prefetch)
	}
	if limit := 2*prefetch + concurrency + 4; ahead > limit {
		t.Fatalf("%d of A's jobs started between B's enqueue and B's first start: B waited behind A's backlog (bound %d: twice the prefetch of %d, the %d workers, a ring round)",
			ahead, limit, prefetch, concurrency)
	}
}

// commands returns the server's total processed commands.
func commands(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_commands_processed in INFO")
	return 0
}

// claimCost runs n claims of s on a Redis that nothing else uses and
// returns the commands it processed per claim (those run by scripts
// included), less the INFO calls that count them.
func claimCost(t *testing.T, client *redis.Client, s *Server, n int) float64 {
	t.Helper()
	c0 := commands(t, client)
	for i := 0; i < n; i++ {
		if _, err := s.dispatchOne(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return float64(commands(t, client)-c0-1) / float64(n)
}

// TestExhaustedTenantCostsNothing: per-tenant downstream quotas; A's is
// exhausted (paused after a 429). A worker books B's jobs and runs them;
// the first of A's jobs it is handed goes back, putting A to sleep and
// marking A's key full, and none of A's runs. From then on A's 1,000
// waiting jobs cost no Redis commands: a claim costs what it costs on an
// empty waiting room. The claims are then driven one by one and counted,
// so a busy machine cannot break the test.
func TestExhaustedTenantCostsNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	client := srv.Client(t)
	ctx := context.Background()
	cfg := testConfig(t, 10_000)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	th, err := throttle.New(client, &throttle.Options{Subscribe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	lim := throttle.Limit{Name: "api", Rate: 10, MaxWait: time.Second}
	ds := func(name string) (Downstream, bool) { return Downstream{Limit: lim, PerTenant: true}, name == "api" }
	scfg := ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 4, Prefetch: 1000, Throttle: th, Downstreams: ds, PollInterval: 10 * time.Millisecond}
	d, err := NewServer(client, &scfg)
	if err != nil {
		t.Fatal(err)
	}

	// The cost of a claim on an empty waiting room, for comparison.
	const n = 50
	idle := claimCost(t, client, d, n)

	// A's quota is exhausted: its key is paused for 30s. Then A queues
	// 1,000 jobs and B 20.
	if _, err := th.Pause(ctx, ThrottleKey(&Job{Downstream: "api", Tenant: "A"}, true), lim, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	fill(t, p, "A", 1000, "api")
	fill(t, p, "B", 20, "api")

	var mu sync.Mutex
	bRuns, aRuns := 0, 0
	h := HandlerFunc(func(ctx context.Context, j *Job) error {
		mu.Lock()
		defer mu.Unlock()
		if j.Tenant == "B" {
			bRuns++
		} else {
			aRuns++
		}
		return nil
	})
	w := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 4, Throttle: th, Downstreams: ds, PollInterval: 10 * time.Millisecond}, h)
	waitFor(t, 30*time.Second, "B's 20 jobs, and A asleep with its 1,000", func() bool {
		st, err := p.Stats(ctx)
		mu.Lock()
		defer mu.Unlock()
		return err == nil && bRuns >= 20 && st.Sleeping == 1 && st.Depth == 1000 && st.HandedOver == 0
	})
	w.Shutdown()
	mu.Lock()
	ran := aRuns
	mu.Unlock()
	if ran != 0 {
		t.Fatalf("%d of A's jobs ran during A's pause", ran)
	}
	// Now only A's paused backlog waits: a claim costs what it costs on an
	// empty waiting room, not in proportion to 1,000 jobs.
	waiting := claimCost(t, client, d, n)
	t.Logf("Redis commands per claim: empty waiting room %.2f, with A's 1,000 jobs paused %.2f", idle, waiting)
	if waiting > idle+0.5 {
		t.Fatalf("with A's 1,000 jobs paused a claim costs %.2f commands, over the %.2f of an empty waiting room", waiting, idle)
	}
	if st, _ := p.Stats(ctx); st.Sleeping != 1 || st.Depth != 1000 || st.HandedOver != 0 {
		t.Fatalf("stats %+v: want A asleep with its 1,000 jobs", st)
	}
}

// TestMarkedKeySkipsEveryTenant: a shared downstream is paused. The first
// job a worker is handed goes back and marks the key full; from then on
// the claims hand over no job of that key, whatever its tenant: a tenant
// whose next job names it sleeps until the mark ends, its jobs left
// waiting, while a job of another downstream goes at once.
func TestMarkedKeySkipsEveryTenant(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg, p := testProducer(t, client, 1000)
		th := testThrottle(t, client, nil)
		lim := throttle.Limit{Name: "api", Rate: 100, MaxWait: time.Second}
		ds := func(name string) (Downstream, bool) { return Downstream{Limit: lim}, name == "api" || name == "other" }
		if _, err := th.Pause(ctx, "api", lim, time.Hour); err != nil {
			t.Fatal(err)
		}
		fill(t, p, "first", 1, "api")
		rec := newRecorder()
		w := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th, Downstreams: ds, PollInterval: 10 * time.Millisecond}, rec)
		waitFor(t, 30*time.Second, "the first job back in the waiting room", func() bool {
			st, err := p.Stats(ctx)
			return err == nil && st.Sleeping == 1 && st.Depth == 1 && st.HandedOver == 0
		})
		// Ten more tenants on the paused key, one on another downstream.
		for i := range 10 {
			fill(t, p, fmt.Sprintf("t%d", i), 3, "api")
		}
		fill(t, p, "free", 1, "other")
		waitFor(t, 30*time.Second, "the other downstream's job, and the ten tenants asleep", func() bool {
			st, err := p.Stats(ctx)
			return err == nil && rec.count() == 1 && st.Sleeping == 11 && st.Depth == 31 && st.HandedOver == 0
		})
		w.Shutdown()
		if sleepers, err := p.Sleepers(ctx, 20); err != nil || len(sleepers) != 11 {
			t.Fatalf("sleepers %v, %v", sleepers, err)
		}
		if got := rec.order[0].Tenant; got != "free" {
			t.Fatalf("ran %s's job; want only free's", got)
		}
		// None of the ten tenants' jobs was handed over (and put back).
		for i := range 10 {
			_, list, _ := w.shards[0].tenant(fmt.Sprintf("t%d", i))
			items, err := client.LRange(ctx, list, 0, -1).Result()
			if err != nil || len(items) != 3 {
				t.Fatalf("t%d's list: %d jobs, %v", i, len(items), err)
			}
			for _, it := range items {
				if j, err := decodeItem(it); err != nil || j.moves != 0 {
					t.Fatalf("t%d's job: %+v, %v; want it never handed over", i, j, err)
				}
			}
		}
	})
}

// TestClaimGoesOnPastEmptiedTenants: tenants whose lists have emptied stay
// in the ring until a claim reaches them, and a claim leaves after 32 of
// them to stay short. With 100 such tenants ahead of one that has work,
// the dispatcher must go on at once, claim after claim, rather than wait
// for a poll as if nothing were ready.
func TestClaimGoesOnPastEmptiedTenants(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 1000)
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			if _, err := p.Enqueue(ctx, Job{Tenant: "e" + strconv.Itoa(i), Type: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Prefetch: 1000})
		if err != nil {
			t.Fatal(err)
		}
		// One job each, taken in one pass of claims of claimBatch: the
		// ring still holds all 100.
		for i := 0; i < (100+claimBatch-1)/claimBatch; i++ {
			if _, err := s.dispatchOne(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth-st.HandedOver != 0 {
			t.Fatalf("stats %+v, %v; want every job handed over", st, err)
		}
		if n, err := client.LLen(ctx, s.shards[0].ring).Result(); err != nil || n < 64 {
			t.Fatalf("ring holds %d tenants, %v; want the emptied ones still in it", n, err)
		}
		if _, err := p.Enqueue(ctx, Job{Tenant: "z", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		for claims := 1; ; claims++ {
			wait, err := s.dispatchOne(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st, err := p.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Depth == st.HandedOver {
				t.Logf("z's job handed over at claim %d", claims)
				break
			}
			if wait > 0 {
				t.Fatalf("claim %d: told to wait %v with z's job still waiting", claims, wait)
			}
			if claims > 10 {
				t.Fatalf("z's job still waiting after %d claims", claims)
			}
		}
	})
}

// TestClaimTakesWeightedTurnsInOrder: the ring turns by weight across
// claims, a claim of 5 jobs at a time: tenant a of weight 2, b of 1 and c
// of 3 are served a a b c c c, and again, whatever claim a run of turns
// falls in (c's third turn comes at the start of the second claim).
func TestClaimTakesWeightedTurnsInOrder(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 1000)
		weights := map[string]int{"a": 2, "b": 1, "c": 3}
		cfg.Tenants = func(tenant string) TenantPolicy { return TenantPolicy{Weight: weights[tenant]} }
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 12; i++ {
			for _, tenant := range []string{"a", "b", "c"} {
				if _, err := p.Enqueue(ctx, Job{ID: tenant + strconv.Itoa(i), Tenant: tenant, Type: "x"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 1, Prefetch: 5})
		if err != nil {
			t.Fatal(err)
		}
		k := s.shards[0]
		var got []string
		for claim := 0; claim < 4; claim++ {
			if _, err := s.dispatchOne(ctx); err != nil {
				t.Fatal(err)
			}
			ids, err := client.LRange(ctx, k.asynqPending, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			// LPUSHed: the first handed over is the last in the list.
			for i := len(ids) - 1; i >= 0; i-- {
				_, scoped, _ := strings.Cut(ids[i], "/")
				got = append(got, scoped[:1])
			}
			// The workers take them.
			if err := client.Del(ctx, k.asynqPending).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if want := "aabcccaabcccaabcccaa"; strings.Join(got, "") != want {
			t.Fatalf("turns %s; want %s", strings.Join(got, ""), want)
		}
	})
}
