package queue_test

// Scale: many tenants, each with an admission policy, through one queue on
// a private redis-server. Every key a tenant causes must either expire by
// itself or disappear when the queue drains, so that Redis returns to
// where it started.
//
//	go test -run TestManyTenants -v ./queue                            # 10,000 tenants
//	go test -run TestManyTenants -v ./queue -scale.tenants=100000      # the full run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

var scaleTenants = flag.Int("scale.tenants", 10000, "tenants in TestManyTenants (the full run is 100000)")

// The policy every tenant gets: one job per 2 s, so that admission state
// lives at most 2 s after a tenant's last job.
var scalePolicy = algorithms.Policy{Algorithm: algorithms.TokenBucket, Limit: 1, Period: 2 * time.Second}

// scaleQueue is the queue's name; its hash tag is {scale}, asynq's.
const scaleQueue = "scale"

// keyClass sorts a key into what it belongs to, and says whether it may
// live without a TTL.
func keyClass(k string) (class string, permanent bool) {
	const room = "sluice:q:"
	tag := ":{" + scaleQueue + "}"
	switch {
	case strings.HasPrefix(k, room+"adm"+tag+":"):
		return "admission state", false
	case strings.HasPrefix(k, "sluice:th:rate:{"):
		return "throttle state", false
	case strings.HasPrefix(k, room+"t"+tag+":"):
		// A tenant's list: exists while it holds jobs, deleted by Redis
		// when its last job is taken.
		return "tenant lists", true
	case strings.HasPrefix(k, room) && strings.HasSuffix(k, tag):
		// meta (the depth counter) stays; the others (cdepth, ring,
		// members, weights, turns, sleep, ids) hold one entry
		// per tenant, class or job present and vanish when empty.
		return "waiting room structures", true
	case strings.HasPrefix(k, "asynq:{"+scaleQueue+"}:t:"):
		// Completed tasks, kept for ServerConfig.Retention, deleted by
		// asynq's janitor (every 8 s); asynq gives them no TTL.
		return "asynq tasks", true
	case strings.HasPrefix(k, "asynq:servers:") || strings.HasPrefix(k, "asynq:workers:") ||
		strings.HasPrefix(k, "asynq:{"+scaleQueue+"}:processed:") || strings.HasPrefix(k, "asynq:{"+scaleQueue+"}:failed:"):
		return "asynq heartbeats and daily stats", false
	case strings.HasPrefix(k, "asynq:"):
		// asynq:queues, asynq:servers, asynq:workers, and the queue's
		// pending, active, lease, completed, processed, failed, ...
		return "asynq structures", true
	}
	return "unknown", false
}

// keyCensus scans every key and checks its TTL against keyClass (t.Errorf
// for each key that breaks a rule; safe from any goroutine). It returns
// the count per class.
func keyCensus(t *testing.T, ctx context.Context, c *redis.Client) (map[string]int, error) {
	counts := map[string]int{}
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "*", 2000).Result()
		if err != nil {
			return nil, err
		}
		pipe := c.Pipeline()
		ttls := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			ttls[i] = pipe.PTTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for i, k := range keys {
			class, permanent := keyClass(k)
			ttl := ttls[i].Val()
			if ttl == -2 { // expired between SCAN and PTTL
				continue
			}
			counts[class]++
			switch {
			case class == "unknown":
				t.Errorf("key %q belongs to nothing this test knows", k)
			case !permanent && ttl < 0:
				t.Errorf("key %q (%s) has no TTL", k, class)
			case class == "admission state" && ttl > scalePolicy.Period+time.Second:
				t.Errorf("admission key %q lives %v; its state is empty after %v", k, ttl, scalePolicy.Period)
			case class == "throttle state" && ttl > 2*time.Second:
				t.Errorf("throttle key %q lives %v", k, ttl)
			}
			if len(k) > 200 {
				t.Errorf("key %.60q... is %d bytes", k, len(k))
			}
		}
		cursor = next
		if cursor == 0 {
			return counts, nil
		}
	}
}

// memory returns INFO memory's used_memory and, of it, the buffers of the
// connected clients (mem_clients_normal), in bytes. The comparisons with
// the baseline leave the clients out: a run opens more connections than
// the baseline had, and their buffers are not data.
func memory(t *testing.T, ctx context.Context, c *redis.Client) (used, clients int64) {
	t.Helper()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	field := func(name string) int64 {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(line, name+":"); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("INFO memory has no %s", name)
		return 0
	}
	return field("used_memory"), field("mem_clients_normal")
}

// dataMemory is used_memory without the clients' buffers.
func dataMemory(t *testing.T, ctx context.Context, c *redis.Client) int64 {
	used, clients := memory(t, ctx, c)
	return used - clients
}

// scaleTenant returns tenant i's id: plain ids, and every third one with
// braces, a colon and a space, so that both key encodings are exercised.
func scaleTenant(i int) string {
	if i%3 == 0 {
		return fmt.Sprintf("{shop:%d} inc", i)
	}
	return fmt.Sprintf("shop-%d", i)
}

// TestManyTenants: scale.tenants tenants, each admitted by a token bucket
// of one job per 2 s, every fourth one also paced by its own throttle key
// (per-tenant downstream). Round 1 enqueues one job per tenant and tries a
// second at once, which is refused and writes nothing; round 2, one period
// later, enqueues another job per tenant while four queue.Servers drain
// both rounds with a no-op handler. During the run every key is either
// given a TTL (admission and throttle state, heartbeats) or is one of the
// waiting room's and asynq's own structures, which empty out as jobs
// drain. After the drain and the TTLs, the key count and used_memory come
// back to the baseline taken before the run.
func TestManyTenants(t *testing.T) {
	n := *scaleTenants
	if testing.Short() {
		n = min(n, 2000)
	}
	srv := redistest.Start(t, redistest.Config{})
	opts := srv.Options()
	opts.PoolSize = 64
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	started := time.Now()

	cfg := queue.Config{Queue: scaleQueue, Bound: int64(2 * n), TenantBound: 2,
		Tenants: func(string) queue.TenantPolicy { return queue.TenantPolicy{Admission: &scalePolicy} }}
	p, err := queue.NewProducer(c, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	th, err := throttle.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	shop := queue.Downstream{Limit: throttle.Limit{Name: "shop", Rate: 4, Per: time.Second, MaxWait: 5 * time.Second}, PerTenant: true}
	var ran atomic.Int64
	var servers []*queue.Server
	startServers := func() {
		for range 4 {
			s, err := queue.NewServer(c, &queue.ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, Concurrency: 16, Prefetch: 256,
				Throttle: th, Downstreams: func(name string) (queue.Downstream, bool) { return shop, name == "shop" },
				Retention: time.Second, PollInterval: 5 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(queue.HandlerFunc(func(context.Context, *queue.Job) error { ran.Add(1); return nil })); err != nil {
				t.Fatal(err)
			}
			servers = append(servers, s)
		}
	}
	defer func() {
		for _, s := range servers {
			s.Shutdown()
		}
	}()
	waitRan := func(want int64, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for ran.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d jobs ran within %v", ran.Load(), want, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// settle polls until only the permanent keys of the baseline are
	// left and used_memory is within slack of target.
	settle := func(what string, baseKeys int64, target, slack int64, within time.Duration) (keys int64, mem int64, took time.Duration) {
		t.Helper()
		t0 := time.Now()
		deadline := t0.Add(within)
		for {
			// SCAN also expires the keys it meets whose TTL has passed.
			counts, err := keyCensus(t, ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			keys, _ = c.DBSize(ctx).Result()
			mem = dataMemory(t, ctx, c)
			transient := counts["admission state"] + counts["throttle state"] + counts["tenant lists"] + counts["asynq tasks"]
			if transient == 0 && keys <= baseKeys && (target < 0 || mem <= target+slack) {
				return keys, mem, time.Since(t0)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not settled after %v: %d keys (%v), used_memory %d (target %d + %d)", what, within, keys, counts, mem, target, slack)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Baseline: a server has run and drained a few jobs, so that scripts,
	// asynq's heartbeats and its stats keys exist; then everything
	// transient has gone.
	startServers()
	for i := range 20 {
		if _, err := p.Enqueue(ctx, queue.Job{Tenant: fmt.Sprintf("warm-%d", i), Type: "noop", Downstream: "shop"}); err != nil {
			t.Fatal(err)
		}
	}
	waitRan(20, 30*time.Second)
	baseKeys, baseMem, tookBase := settle("baseline", 1<<62, -1, 0, 60*time.Second)
	baseMem = dataMemory(t, ctx, c)
	ran.Store(0)
	baseUsed, baseClients := memory(t, ctx, c)
	t.Logf("baseline: %d keys, used_memory %d B of which clients %d B (settled in %v)", baseKeys, baseUsed, baseClients, tookBase.Round(time.Millisecond))
	for _, s := range servers {
		s.Shutdown()
	}
	servers = nil

	// Round 1, nothing draining: each tenant's job is admitted, a second
	// one at once is refused by its policy.
	job := func(i int) queue.Job {
		j := queue.Job{Tenant: scaleTenant(i), Type: "noop"}
		if i%4 == 0 {
			j.Downstream = "shop"
		}
		return j
	}
	var refused atomic.Int64
	enqueueAll := func(round int, retry bool) time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n || t.Failed() {
						return
					}
					if _, err := p.Enqueue(ctx, job(i)); err != nil {
						t.Errorf("round %d, tenant %q: %v", round, scaleTenant(i), err)
						return
					}
					if !retry {
						continue
					}
					_, err := p.Enqueue(ctx, job(i))
					var rl *queue.RateLimitedError
					if !errors.As(err, &rl) || rl.Decision.RetryAfter <= 0 || rl.Decision.RetryAfter > scalePolicy.Period {
						t.Errorf("round %d, tenant %q, second job: %v; want rate limited for at most %v", round, scaleTenant(i), err, scalePolicy.Period)
						return
					}
					refused.Add(1)
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		return time.Since(t0)
	}
	took1 := enqueueAll(1, true)
	round1End := time.Now()
	st, err := p.Stats(ctx)
	if err != nil || st.Depth != int64(n) || st.Tenants != int64(n) || refused.Load() != int64(n) {
		t.Fatalf("after round 1: %+v (%v), %d refused; want %d jobs of %d tenants, %d refused", st, err, refused.Load(), n, n, n)
	}
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if d, err := p.TenantDepth(ctx, scaleTenant(i)); err != nil || d != 1 {
			t.Fatalf("tenant %q: depth %d (%v), want 1", scaleTenant(i), d, err)
		}
	}
	peakKeys, _ := c.DBSize(ctx).Result()
	peakMem := dataMemory(t, ctx, c)
	census, err := keyCensus(t, ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	perTenant := float64(peakMem-baseMem) / float64(n)
	// What single keys cost: a tenant's list holding one job, under a
	// hashed and a verbatim id, and the admission state of the last tenant
	// enqueued (the earlier ones may have expired already).
	for _, i := range []int{0, 1, n - 1} {
		enc, err := keyspace.Encode(scaleTenant(i))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"sluice:q:t:{" + scaleQueue + "}:" + enc, "sluice:q:adm:{" + scaleQueue + "}:token_bucket:" + enc} {
			if b, err := c.MemoryUsage(ctx, k, 0).Result(); err == nil {
				t.Logf("MEMORY USAGE %s (tenant %q): %d B", k, scaleTenant(i), b)
			}
		}
	}
	t.Logf("round 1: %d tenants enqueued (+%d refused) in %v; %d keys %v; used_memory without clients %d B: %.0f B per tenant waiting",
		n, refused.Load(), took1.Round(time.Millisecond), peakKeys, census, peakMem, perTenant)

	// Round 2 once every tenant's token is back (the policy's period after
	// round 1 ended, on the same host clock as the Redis server's), with
	// the drain running and the keys checked while it does.
	startServers()
	time.Sleep(time.Until(round1End.Add(scalePolicy.Period + 50*time.Millisecond)))
	done := make(chan struct{})
	var mu sync.Mutex
	var censuses []map[string]int
	go func() {
		defer close(done)
		for ran.Load() < int64(2*n) && !t.Failed() {
			m, err := keyCensus(t, ctx, c)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			censuses = append(censuses, m)
			mu.Unlock()
			time.Sleep(250 * time.Millisecond) // pace the scans; not a wait for anything
		}
	}()
	took2 := enqueueAll(2, false)
	t.Logf("round 2: %d tenants enqueued in %v while draining", n, took2.Round(time.Millisecond))
	t0 := time.Now()
	waitRan(int64(2*n), time.Duration(n/100+60)*time.Second)
	<-done
	tookDrain := time.Since(round1End)
	mu.Lock()
	t.Logf("drained %d jobs %v after round 1 (round 2 + drain tail %v); %d key censuses during the run, the last: %v",
		2*n, tookDrain.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), len(censuses), censuses[len(censuses)-1])
	mu.Unlock()
	if st, err := p.Stats(ctx); err != nil || st.Depth != 0 {
		t.Fatalf("after the drain: %+v, %v", st, err)
	}

	// After: the TTLs pass, asynq's janitor removes the completed tasks,
	// Redis shrinks its tables: back to the baseline.
	slack := max(int64(256<<10), (peakMem-baseMem)/100)
	afterKeys, afterMem, tookAfter := settle("after", baseKeys, baseMem, slack, 60*time.Second)
	afterUsed, afterClients := memory(t, ctx, c)
	t.Logf("after: %d keys (baseline %d), used_memory without clients %d B (baseline %d, %+d B), %v after the drain; used_memory %d B of which clients %d B",
		afterKeys, baseKeys, afterMem, baseMem, afterMem-baseMem, tookAfter.Round(time.Millisecond), afterUsed, afterClients)
	var leftover []string
	keys, _ := c.Keys(ctx, "*").Result()
	sort.Strings(keys)
	for _, k := range keys {
		if ttl, _ := c.PTTL(ctx, k).Result(); ttl < 0 {
			leftover = append(leftover, k)
		}
	}
	t.Logf("keys without a TTL after the run: %q", leftover)
	if got := ran.Load(); got != int64(2*n) {
		t.Errorf("the handler ran %d times for %d jobs", got, 2*n)
	}
	t.Logf("SCALE %d tenants (used_memory without clients): baseline %d B / %d keys; peak %d B / %d keys (%.0f B per waiting tenant); after %d B / %d keys; total %v",
		n, baseMem, baseKeys, peakMem, peakKeys, perTenant, afterMem, afterKeys, time.Since(started).Round(time.Second))
}
