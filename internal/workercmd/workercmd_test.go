package workercmd

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redisconn"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain checks that a worker run to its end (SIGTERM, a bad policy)
// leaves no goroutine behind.
func TestMain(m *testing.M) { redistest.Main(m) }

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestWorkerBadPolicy(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte("queue:\n  bound: 10\ndownstreams:\n  api:\n    rate: 0\n"), 0o644)
	var out bytes.Buffer
	if code := Main(context.Background(), []string{"-policy", policy}, io.Discard, &out); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(out.String(), "policy.yaml:5") || !strings.Contains(out.String(), "downstreams.api.rate") {
		t.Fatalf("the error does not name the line and field:\n%s", out.String())
	}
}

// TestWorkerCAWithoutRedis: a -redis-ca without -redis or -redis-cluster
// is refused, not ignored by starting the embedded Redis.
func TestWorkerCAWithoutRedis(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(policy, []byte("queue:\n  bound: 10\n"), 0o644)
	var out bytes.Buffer
	args := []string{"-policy", policy, "-redis", "", "-redis-cluster", "", "-redis-ca", "ca.pem", "-listen", "127.0.0.1:0"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a worker that starts anyway stops
	defer cancel()
	if code := Main(ctx, args, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "-redis-ca is set") {
		t.Fatalf("exit %d, output %q; want 1 and the -redis-ca error", code, out.String())
	}
}

// TestDemoRuns: the demo says at once that it starts, reaches the fake
// API, and exits 0 with its summary (3 s: all within the time it gives the
// fleet to learn the API's limit).
func TestDemoRuns(t *testing.T) {
	var out, errb strings.Builder
	code := Main(context.Background(), []string{"-demo", "-demo-duration", "3s", "-demo-quota", "20"}, &out, &errb)
	if code != 0 || !strings.HasPrefix(out.String(), "sluice demo: starting") || !strings.Contains(out.String(), "refused by the API with 429") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}

// TestWorkerNeedsRedis: without -redis the worker exits 2 with the
// enqueue CLI's message, not starting an embedded Redis (queue/worker's
// TestEmbeddedRedisWarns runs one with -redis embedded).
func TestWorkerNeedsRedis(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a worker that starts anyway stops
	defer cancel()
	code := Main(ctx, []string{"-policy", policy, "-redis", "", "-redis-cluster", "", "-listen", "127.0.0.1:0"}, io.Discard, &out)
	if code != 2 || !strings.Contains(out.String(), redisconn.NotConfigured) || !strings.Contains(out.String(), "-redis embedded") {
		t.Fatalf("exit %d, stderr %q; want 2 and %q", code, out.String(), redisconn.NotConfigured)
	}
}

// TestWorkerEvictingRedisExits: a Redis with maxmemory and allkeys-lru
// stops the worker at start with exit 1, naming the policy and the flag.
func TestWorkerEvictingRedisExits(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := Main(ctx, []string{"-policy", policy, "-redis", "redis://" + srv.Addr() + "/0", "-listen", "127.0.0.1:0"}, io.Discard, &out)
	if code != 1 || !strings.Contains(out.String(), "maxmemory-policy allkeys-lru") || !strings.Contains(out.String(), "-allow-evicting-redis") {
		t.Fatalf("exit %d, stderr %q; want 1 naming the policy and the flag", code, out.String())
	}
}

// TestRedisDownSaysItFirst: with Redis unreachable the worker's first
// line on standard error is its own error, not go-redis's "failed to
// dial" lines (issue 19, finding 12). go-redis writes to the process's
// standard error, not to Main's writer, so the worker runs in a child
// process of this test.
func TestRedisDownSaysItFirst(t *testing.T) {
	if args := os.Getenv("SLUICE_TEST_WORKER_ARGS"); args != "" {
		os.Exit(Main(context.Background(), strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-policy", policy, "-redis", "redis://" + freeAddr(t) + "/0", "-listen", freeAddr(t)}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisDownSaysItFirst$")
	cmd.Env = append(os.Environ(), "SLUICE_TEST_WORKER_ARGS="+strings.Join(args, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("%v; want exit 1\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(stderr.String(), "sluice worker: connecting to Redis: ") || strings.Contains(stderr.String(), "failed to dial") {
		t.Errorf("standard error\n%s\nwant the worker's own error first and no go-redis lines", stderr.String())
	}
}
