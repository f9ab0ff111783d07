package enqueuecmd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// redisCLI is a cli on a redis-server of its own started with args.
func redisCLI(t *testing.T, args ...string) (*cli, *redis.Client) {
	srv := redistest.Start(t, redistest.Config{Args: args})
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: cli\n  bound: 1000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &cli{t: t, policy: policy, redis: "redis://" + srv.Addr() + "/0"}, srv.Client(t)
}

// fillTo writes padding keys until Redis's used_memory is above share of
// its maxmemory.
func fillTo(t *testing.T, client *redis.Client, share float64) {
	t.Helper()
	ctx := context.Background()
	pad := strings.Repeat("p", 32<<10)
	for i := 0; ; i++ {
		text := client.Info(ctx, "memory").Val()
		var used, max float64
		for _, l := range strings.Split(text, "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				used, _ = strconv.ParseFloat(v, 64)
			}
			if v, ok := strings.CutPrefix(l, "maxmemory:"); ok {
				max, _ = strconv.ParseFloat(v, 64)
			}
		}
		if used > share*max {
			return
		}
		if err := client.Set(ctx, "pad:"+strconv.Itoa(i), pad, 0).Err(); err != nil {
			t.Fatalf("padding: %v (used %.0f of %.0f)", err, used, max)
		}
	}
}

// TestRedisFullExitCode: with Redis above the share of maxmemory that
// producers may fill, one job is refused with exit 6 and a message naming
// Redis's memory, and a JSON lines file reports its lines as redis-full.
func TestRedisFullExitCode(t *testing.T) {
	c, client := redisCLI(t, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	fillTo(t, client, 0.93)
	code, out, errs := c.run("", "-tenant", "acme", "-type", "x")
	if code != ExitRedisFull || out != "" || !strings.Contains(errs, "Redis is out of memory") || !strings.Contains(errs, "retry in 5s") {
		t.Errorf("one job: exit %d, stdout %q, stderr %q; want exit %d naming Redis's memory", code, out, errs, ExitRedisFull)
	}
	code, out, errs = c.run("{\"tenant\":\"a\",\"type\":\"x\"}\n{\"tenant\":\"b\",\"type\":\"x\"}\n", "-f", "-", "-q")
	if code != ExitRedisFull || out != "refused 1 redis-full\nrefused 2 redis-full\n" || !strings.Contains(errs, "stdin:1: sluice: Redis is out of memory") {
		t.Errorf("-f: exit %d, stdout %q, stderr %q; want exit %d, two redis-full lines", code, out, errs, ExitRedisFull)
	}
}

// TestEvictingRedisExit: a Redis with maxmemory and allkeys-lru is refused
// at start with exit 1, a message naming the policy and the flag, and
// nothing written; -allow-evicting-redis enqueues with a warning; stats
// only warns.
func TestEvictingRedisExit(t *testing.T) {
	c, client := redisCLI(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	code, out, errs := c.run("", "-tenant", "acme", "-type", "x")
	if code != ExitFailure || out != "" || !strings.Contains(errs, "maxmemory-policy allkeys-lru") || !strings.Contains(errs, "-allow-evicting-redis") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1 naming the policy and the flag", code, out, errs)
	}
	if n := client.DBSize(context.Background()).Val(); n != 0 {
		t.Errorf("%d keys written", n)
	}
	code, out, errs = c.run("", "-tenant", "acme", "-type", "x", "-allow-evicting-redis")
	if code != ExitOK || out == "" || !strings.Contains(errs, "WARNING") || !strings.Contains(errs, "allkeys-lru") {
		t.Errorf("-allow-evicting-redis: exit %d, stdout %q, stderr %q; want accepted with a warning", code, out, errs)
	}
	code, out, errs = c.run("", "stats")
	if code != ExitOK || !strings.Contains(out, "depth        1 of") || !strings.Contains(errs, "WARNING") {
		t.Errorf("stats: exit %d, stdout %q, stderr %q; want the stats and a warning", code, out, errs)
	}
}
