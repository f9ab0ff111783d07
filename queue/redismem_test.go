package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// infoField returns one numeric field of INFO section on client's server
// (0 when absent).
func infoField(t *testing.T, client *redis.Client, section, field string) int64 {
	t.Helper()
	text, err := client.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
			// errorstat_OOM:count=3
			if c, ok := strings.CutPrefix(v, "count="); ok {
				n, _ := strconv.ParseInt(c, 10, 64)
				return n
			}
		}
	}
	return 0
}

// rejectedCommands lists the commands Redis refused or failed (INFO
// commandstats, Redis 7), for a failure message.
func rejectedCommands(t *testing.T, client *redis.Client) string {
	t.Helper()
	text, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "rejected_calls=") && !strings.Contains(line, "rejected_calls=0,failed_calls=0") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}

// TestRedisFullRefusedThenDrained: a redis-server with maxmemory 8mb and
// noeviction; four goroutines enqueue 300-byte jobs until refused. Every
// refusal names Redis's memory (ErrRedisFull, "out of memory"), Redis
// itself never had to refuse a write (sluice refused first), POST
// /enqueue answers 507 redis_full, and then workers drain the queue to
// empty: every accepted job runs, once.
func TestRedisFullRefusedThenDrained(t *testing.T) {
	const maxmemory = 8 << 20
	srv := redistest.Start(t, redistest.Config{Args: []string{"--maxmemory", strconv.Itoa(maxmemory), "--maxmemory-policy", "noeviction"}})
	client := srv.Client(t)
	ctx := context.Background()
	cfg := testConfig(t, 1_000_000)
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(strings.Repeat("x", 300))
	var mu sync.Mutex
	accepted := map[string]bool{}
	var refusals []error
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100_000; i++ {
				r, err := p.Enqueue(ctx, Job{Tenant: fmt.Sprintf("t%d", (g*7+i)%13), Type: "noop", Payload: payload})
				mu.Lock()
				if err != nil {
					refusals = append(refusals, err)
				} else {
					accepted[r.ID] = true
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	used := infoField(t, client, "memory", "used_memory")
	t.Logf("accepted %d jobs; used_memory %d of maxmemory %d (%.1f%%)", len(accepted), used, maxmemory, 100*float64(used)/maxmemory)
	if len(accepted) < 1000 {
		t.Fatalf("only %d jobs accepted", len(accepted))
	}
	for _, err := range refusals {
		var full *RedisFullError
		if !errors.Is(err, ErrRedisFull) || !errors.As(err, &full) || !strings.Contains(err.Error(), "out of memory") {
			t.Fatalf("refusal %v; want a *RedisFullError naming out of memory", err)
		}
		if full.Err != nil {
			t.Errorf("Redis refused a write itself (%v): sluice should refuse first", full.Err)
		}
	}
	t.Logf("refusal: %v", refusals[0])
	if n := infoField(t, client, "errorstats", "errorstat_OOM"); n != 0 {
		t.Errorf("Redis answered OOM %d times; sluice should refuse before it does", n)
	}

	// Over HTTP: 507, a body that says so, and a Retry-After.
	h := httptest.NewServer(HTTPHandler(p))
	defer h.Close()
	resp, err := http.Post(h.URL, "application/json", strings.NewReader(`{"tenant":"http","type":"noop"}`))
	if err != nil {
		t.Fatal(err)
	}
	var body EnqueueResponse
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage || body.Reason != "redis_full" || !strings.Contains(body.Error, "out of memory") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("POST /enqueue: %d %+v Retry-After %q; want 507 redis_full", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}

	// The workers drain everything that was accepted, at once.
	rec := newRecorder()
	startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 8, Prefetch: 200}, rec)
	waitFor(t, 3*time.Minute, fmt.Sprintf("%d jobs to run", len(accepted)), func() bool { return rec.count() >= len(accepted) })
	rec.mu.Lock()
	for id := range accepted {
		if rec.runs[id] != 1 {
			t.Errorf("job %s ran %d times", id, rec.runs[id])
		}
	}
	rec.mu.Unlock()
	waitFor(t, 10*time.Second, "depth 0", func() bool {
		st, err := p.Stats(ctx)
		return err == nil && st.Depth == 0
	})
	t.Logf("drained; used_memory_peak %d of maxmemory %d", infoField(t, client, "memory", "used_memory_peak"), maxmemory)
	if n := infoField(t, client, "errorstats", "errorstat_OOM"); n != 0 {
		t.Errorf("Redis answered OOM %d times while the workers drained; commands refused: %s", n, rejectedCommands(t, client))
	}
	// Drained, the producer takes jobs again (after its next sample).
	waitFor(t, 5*time.Second, "an enqueue accepted", func() bool {
		_, err := p.Enqueue(ctx, Job{Tenant: "after", Type: "noop"})
		return err == nil
	})
}

// TestRedisOOMIsRedisFull: with the headroom off, Redis's own OOM refusal
// is a *RedisFullError that wraps it.
func TestRedisOOMIsRedisFull(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{Args: []string{"--maxmemory", "4mb", "--maxmemory-policy", "noeviction"}})
	client := srv.Client(t)
	cfg := testConfig(t, 1_000_000)
	cfg.MemoryHeadroom = -1
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(strings.Repeat("x", 1000))
	for i := 0; ; i++ {
		if i == 100_000 {
			t.Fatal("4mb of Redis took 100,000 jobs of 1 kB")
		}
		_, err := p.Enqueue(context.Background(), Job{Tenant: "t", Type: "noop", Payload: payload})
		if err == nil {
			continue
		}
		var full *RedisFullError
		if !errors.Is(err, ErrRedisFull) || !errors.As(err, &full) || full.Err == nil || !strings.Contains(err.Error(), "OOM") || !strings.Contains(err.Error(), "out of memory") {
			t.Fatalf("%v; want a *RedisFullError wrapping Redis's OOM", err)
		}
		t.Logf("refusal after %d jobs: %v", i, err)
		return
	}
}

// TestEvictingRedisRefused: a Redis with a maxmemory and any policy but
// noeviction (volatile-* too) is refused by CheckRedis and Enqueue, which
// writes nothing; AllowEviction lets it through; no maxmemory, or
// noeviction, passes.
func TestEvictingRedisRefused(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	client := srv.Client(t)
	ctx := context.Background()
	set := func(max, policy string) {
		t.Helper()
		if err := client.ConfigSet(ctx, "maxmemory", max).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		max, policy string
		allow       bool
		refused     bool
	}{
		{"64mb", "allkeys-lru", false, true},
		{"64mb", "allkeys-lfu", false, true},
		{"64mb", "allkeys-random", false, true},
		{"64mb", "volatile-lru", false, true},
		{"64mb", "volatile-ttl", false, true},
		{"64mb", "allkeys-lru", true, false},
		{"0", "allkeys-lru", false, false},
		{"64mb", "noeviction", false, false},
	} {
		set(c.max, c.policy)
		cfg := testConfig(t, 100)
		cfg.AllowEviction = c.allow
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkErr := p.CheckRedis(ctx)
		_, err = p.Enqueue(ctx, Job{Tenant: "a", Type: "noop"})
		st, serr := p.Stats(ctx)
		if serr != nil {
			t.Fatal(serr)
		}
		name := fmt.Sprintf("maxmemory %s %s allow=%v", c.max, c.policy, c.allow)
		if c.allow && !errors.Is(checkErr, ErrRedisEvicts) {
			t.Errorf("maxmemory %s %s allowed: CheckRedis %v; want it reported still", c.max, c.policy, checkErr)
		}
		if c.allow {
			checkErr = nil
		}
		if !c.refused {
			if checkErr != nil || err != nil || st.Depth != 1 {
				t.Errorf("%s: CheckRedis %v, Enqueue %v, depth %d; want accepted", name, checkErr, err, st.Depth)
			}
			continue
		}
		var ev *RedisEvictsError
		for _, e := range []error{checkErr, err} {
			if !errors.Is(e, ErrRedisEvicts) || !errors.As(e, &ev) || ev.Policy != c.policy || !strings.Contains(e.Error(), "noeviction") {
				t.Errorf("%s: %v; want a *RedisEvictsError naming the policy and noeviction", name, e)
			}
		}
		if st.Depth != 0 {
			t.Errorf("%s: depth %d after a refusal", name, st.Depth)
		}
	}
}

// TestEvictingClusterMasterRefused: on a cluster every master is checked;
// one evicting master, not the queue's, is enough to refuse.
func TestEvictingClusterMasterRefused(t *testing.T) {
	cl := redistest.StartCluster(t)
	client := cl.Client(t)
	ctx := context.Background()
	cfg := testConfig(t, 100)
	queueNode, err := client.MasterForKey(ctx, newKeys(DefaultPrefix, cfg.Queue).meta)
	if err != nil {
		t.Fatal(err)
	}
	var other string
	for _, addr := range cl.Addrs() {
		if addr != queueNode.Options().Addr {
			other = addr
		}
	}
	node := redis.NewClient(&redis.Options{Addr: other})
	defer node.Close()
	if err := node.ConfigSet(ctx, "maxmemory", "64mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.ConfigSet(ctx, "maxmemory-policy", "volatile-lfu").Err(); err != nil {
		t.Fatal(err)
	}
	p, err := NewProducer(client, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ev *RedisEvictsError
	if err := p.CheckRedis(ctx); !errors.As(err, &ev) || ev.Addr != other {
		t.Fatalf("CheckRedis: %v; want a *RedisEvictsError for %s", err, other)
	}
	if _, err := p.Enqueue(ctx, Job{Tenant: "a", Type: "noop"}); !errors.Is(err, ErrRedisEvicts) {
		t.Fatalf("Enqueue: %v; want ErrRedisEvicts", err)
	}
}
