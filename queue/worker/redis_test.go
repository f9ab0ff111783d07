package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
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

// TestEmbeddedRedisWarns: RedisURL "embedded" (-redis embedded) starts
// an in-memory Redis and says what it costs; a Config with no Redis is
// refused with ErrNoRedis instead of starting one.
func TestEmbeddedRedisWarns(t *testing.T) {
	policy := plainPolicy(t)
	if _, err := New(&Config{PolicyFile: policy}); !errors.Is(err, ErrNoRedis) || !errors.Is(err, ErrConfig) {
		t.Fatalf("no Redis: %v; want ErrNoRedis", err)
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
// the worker at start (a *queue.RedisEvictsError naming the setting that
// runs anyway); AllowEvictingRedis runs it with a warning and the gauge
// at 1.
func TestWorkerEvictingRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	policy := plainPolicy(t)
	url := "redis://" + srv.Addr() + "/0"
	w, err := New(&Config{PolicyFile: policy, RedisURL: url, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var evicts *queue.RedisEvictsError
	if err := w.Run(ctx); !errors.As(err, &evicts) || evicts.Policy != "allkeys-lru" || !strings.Contains(err.Error(), "AllowEvictingRedis") {
		t.Fatalf("Run: %v; want a *queue.RedisEvictsError naming AllowEvictingRedis", err)
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
