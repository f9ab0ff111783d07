package workercmd

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/internal/redistest"
)

// plainPolicy writes a policy file of a queue without downstreams.
func plainPolicy(t *testing.T) string {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: rm\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return policy
}

// metrics returns the worker's /metrics text.
func metrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestWorkerNeedsRedis: without -redis the worker exits 2 with the
// enqueue CLI's message, not starting an embedded Redis; -redis embedded
// starts one, and says what it costs.
func TestWorkerNeedsRedis(t *testing.T) {
	policy := plainPolicy(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a worker that starts anyway stops
	defer cancel()
	code := Main(ctx, []string{"-policy", policy, "-redis", "", "-redis-cluster", "", "-listen", "127.0.0.1:0"}, io.Discard, &out)
	if code != 2 || !strings.Contains(out.String(), redisconn.NotConfigured) || !strings.Contains(out.String(), "-redis embedded") {
		t.Fatalf("exit %d, stderr %q; want 2 and %q", code, out.String(), redisconn.NotConfigured)
	}
	addr, log := runWorker(t, policy, "-redis", "embedded")
	if !strings.Contains(log.String(), "WARNING: started an embedded Redis") || !strings.Contains(log.String(), "lost when the worker exits") {
		t.Errorf("no warning about the embedded Redis:\n%s", log.String())
	}
	if !strings.Contains(metrics(t, addr), "sluice_redis_evicting 0") {
		t.Errorf("/metrics has no sluice_redis_evicting 0")
	}
}

// TestWorkerEvictingRedis: a Redis with maxmemory and allkeys-lru stops
// the worker at start (exit 1, naming the policy and the flag);
// -allow-evicting-redis runs it with a warning and the gauge at 1.
func TestWorkerEvictingRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	policy := plainPolicy(t)
	url := "redis://" + srv.Addr() + "/0"
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := Main(ctx, []string{"-policy", policy, "-redis", url, "-listen", "127.0.0.1:0"}, io.Discard, &out)
	if code != 1 || !strings.Contains(out.String(), "maxmemory-policy allkeys-lru") || !strings.Contains(out.String(), "-allow-evicting-redis") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the policy and the flag", code, out.String())
	}
	addr, log := runWorker(t, policy, "-redis", url, "-allow-evicting-redis")
	if !strings.Contains(log.String(), "WARNING: Redis at "+srv.Addr()+" has maxmemory-policy allkeys-lru") {
		t.Errorf("no warning:\n%s", log.String())
	}
	waitUntil(t, 10*time.Second, "sluice_redis_evicting 1", func() bool { return strings.Contains(metrics(t, addr), "sluice_redis_evicting 1") })
}

// TestWorkerSeesRedisDataLoss: a redis-server without persistence,
// restarted under a running worker, comes back empty; the worker says so
// in one log line, counts it in sluice_redis_data_lost_total, and puts
// the marker back.
func TestWorkerSeesRedisDataLoss(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	client := srv.Client(t)
	addr, log := runWorker(t, plainPolicy(t), "-redis", "redis://"+srv.Addr()+"/0", "-redis-check-every", "50ms")
	key := redisconn.MarkerPrefix + "{0}"
	waitUntil(t, 10*time.Second, "the marker", func() bool { return client.Exists(context.Background(), key).Val() == 1 })
	if strings.Contains(log.String(), "Redis lost its data") {
		t.Fatalf("a loss reported before the restart:\n%s", log.String())
	}
	srv.Restart(t)
	waitUntil(t, 20*time.Second, "sluice_redis_data_lost_total 1", func() bool {
		return strings.Contains(metrics(t, addr), "sluice_redis_data_lost_total 1")
	})
	waitUntil(t, 10*time.Second, "the marker back", func() bool { return client.Exists(context.Background(), key).Val() == 1 })
	if n := strings.Count(log.String(), "Redis lost its data"); n != 1 || !strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("%d lines about the loss; want one at ERROR:\n%s", n, log.String())
	}
}
