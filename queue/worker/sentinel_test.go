package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
)

// TestSentinelPrimaryKilledMidDrain: a worker on a redis+sentinel://
// URL drains a backlog; the primary is SIGKILLed a third of the way in
// (every accepted job on the replica by then), the Sentinels promote
// the replica, and every job accepted before the kill or after the
// promotion is delivered without a restart, but for the few that the
// replica holds in asynq's active list, dequeued by a reply the kill
// cut off: those must be there, for asynq to recover when their lease
// expires.
func TestSentinelPrimaryKilledMidDrain(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelConfig{Password: "srv-pw", SentinelPassword: "sen-pw"})
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: failover\n  bound: 10000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The producer as the CLI makes it, from the URL.
	client, err := redisconn.Flags{URL: s.URL()}.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p, err := queue.NewProducer(client, &queue.Config{Queue: "failover", Bound: 10000})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const before, after = 600, 100
	for i := range before {
		if _, err := p.Enqueue(ctx, queue.Job{ID: fmt.Sprintf("b%d", i), Tenant: fmt.Sprintf("t%d", i%10), Type: "work"}); err != nil {
			t.Fatal(err)
		}
	}
	s.Synced(t)

	var mu sync.Mutex
	seen := map[string]int{}
	var times []time.Time // of each delivery
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := flagConfig(t, "-policy", policy, "-redis", s.URL(), "-concurrency", "4", "-redis-check-every", "500ms")
	cfg.Listener = ln
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("work", func(ctx context.Context, job *queue.Job) error {
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		seen[job.ID]++
		times = append(times, time.Now())
		mu.Unlock()
		return nil
	})
	runUntilCleanup(t, w, logs)
	waitUntil(t, 60*time.Second, "a third of the backlog delivered", func() bool { return delivered() >= before/3 })
	old := s.Servers()[0]
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := delivered()
	s.Primary(t, old)
	promoted := time.Now()
	for i := range after {
		id := fmt.Sprintf("a%d", i)
		for try := 0; ; try++ { // the client may still be finding the new primary
			_, err := p.Enqueue(ctx, queue.Job{ID: id, Tenant: fmt.Sprintf("t%d", i%10), Type: "work"})
			if err == nil {
				break
			}
			if try == 200 {
				t.Fatalf("enqueue after the promotion: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Every accepted job is delivered, but for those in flight when the
	// primary died, which the replica has in asynq's active list, leased
	// to a server that lost them: asynq recovers them once the lease
	// expires, late, not lost (docs/reliability.md, A failover).
	for deadline := time.Now().Add(30 * time.Second); delivered() < before+after && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	held := map[string]bool{} // job ids in asynq's active list
	if delivered() < before+after {
		tasks, err := asynq.NewInspectorFromRedisClient(client).ListActiveTasks("failover")
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range tasks { // sluice:=<tenant>/<id>@<nonce>:<n>
			if _, rest, ok := strings.Cut(ti.ID, "/"); ok {
				id, _, _ := strings.Cut(rest, "@")
				held[id] = true
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	leased := 0
	for i := range before + after {
		id := fmt.Sprintf("b%d", i)
		if i >= before {
			id = fmt.Sprintf("a%d", i-before)
		}
		switch {
		case seen[id] > 0:
		case held[id]:
			leased++
		default:
			t.Errorf("job %s was neither delivered nor in asynq's active list", id)
		}
	}
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	// The figure, not asserted (a shared machine): the first delivery
	// after the Sentinels named the new primary, and the longest gap
	// between deliveries from then on.
	var first time.Time
	var gap time.Duration
	for i, at := range times {
		if at.After(promoted) {
			if first.IsZero() {
				first = at
			} else {
				gap = max(gap, at.Sub(times[i-1]))
			}
		}
	}
	t.Logf("%d delivered when the primary was killed; deliveries resumed %v after the promotion was reported, longest gap after %v; %d of %d delivered more than once; %d undelivered in asynq's active list, leased to a lost dequeue",
		killedAt, first.Sub(promoted).Round(time.Millisecond), gap.Round(time.Millisecond), twice, len(seen), leased)
}
