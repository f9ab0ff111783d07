package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

func TestStandaloneStartPingStop(t *testing.T) {
	t.Parallel()
	s := Start(t, Config{})
	if host, port, err := net.SplitHostPort(s.Addr()); err != nil || host != "127.0.0.1" || port != strconv.Itoa(s.port) {
		t.Fatalf("Addr() = %q, port %d", s.Addr(), s.port)
	}
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	cfg, err := c.ConfigGet(ctx, "appendonly").Result()
	if err != nil || cfg["appendonly"] != "no" {
		t.Fatalf("appendonly = %v, %v; want no by default", cfg, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !s.proc.exited() {
		t.Fatal("running after Stop")
	}
	if _, err := freePort(s.port); err != nil {
		t.Fatal("the port accepts connections after Stop")
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill after Stop: %v", err)
	}
}

func TestStandalonePassword(t *testing.T) {
	t.Parallel()
	s := Start(t, Config{Password: "s3cret"})
	ctx := context.Background()
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
	anon := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without the password: %v; want NOAUTH", err)
	}
}

func TestRestartKeepsAppendOnlyData(t *testing.T) {
	t.Parallel()
	s := Start(t, Config{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if _, err := freePort(s.port); err != nil {
		t.Fatal("the port is still bound after Kill")
	}
	s.Restart(t)
	if s.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", s.Addr(), addr)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v1" {
		t.Fatalf("after Kill and Restart: GET k = %q, %v; want v1 (from the AOF)", v, err)
	}

	// Restart of a running server stops it gracefully first.
	if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v2" {
		t.Fatalf("after Restart: GET k = %q, %v; want v2", v, err)
	}
	if log, err := os.ReadFile(s.dir + "/" + logName); err != nil || strings.Count(string(log), "Ready to accept connections") != 3 {
		t.Fatalf("log of three starts: %v\n%s", err, log)
	}
}

// TestStartErrorQuotesTheLog: a server that refuses its configuration
// fails the start with its own explanation.
func TestStartErrorQuotesTheLog(t *testing.T) {
	t.Parallel()
	Require(t)
	_, err := launch(Config{Args: []string{"--no-such-directive", "1"}}, false)
	if err == nil || !strings.Contains(err.Error(), "no-such-directive") || errors.Is(err, errPortTaken) {
		t.Fatalf("launch with a bad directive: %v; want an error quoting the log", err)
	}
}

// TestPortTakenIsDetected: a port held by another process, redis or not,
// is reported as taken (so launch tries another), and the other process
// is left alone.
func TestPortTakenIsDetected(t *testing.T) {
	t.Parallel()
	Require(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held := l.Addr().(*net.TCPAddr).Port
	s := &Server{port: held, dir: t.TempDir()}
	if err := s.start(); !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a port held by a listener: %v; want errPortTaken", err)
	}
	if !s.proc.exited() {
		t.Fatal("the failed server is still running")
	}

	other := Start(t, Config{})
	s = &Server{port: other.port, dir: t.TempDir()}
	if err := s.start(); !errors.Is(err, errPortTaken) {
		t.Fatalf("start on another redis-server's port: %v; want errPortTaken", err)
	}
	if err := other.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the other server after the attempt: %v", err)
	}
}

func TestSharedStandalone(t *testing.T) {
	t.Parallel()
	c := Shared(t)
	ctx := context.Background()
	k := KeyPrefix(t) + "k"
	if err := c.Set(ctx, k, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := Shared(t).Get(ctx, k).Result(); err != nil || v != "v" {
		t.Fatalf("second Shared client: GET = %q, %v; want the same server", v, err)
	}
}

// TestSharedCluster: keys spread over the three masters, and the cluster
// enforces slots: one hash tag runs a multi-key script, two get CROSSSLOT.
func TestSharedCluster(t *testing.T) {
	t.Parallel()
	cc := SharedCluster(t)
	ctx := context.Background()
	p := KeyPrefix(t)
	for i := range 100 {
		if err := cc.Set(ctx, fmt.Sprintf("%sk%d", p, i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu     sync.Mutex
		counts = map[string]int{}
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		size, err := node.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		keys, err := scanAll(ctx, node, p+"*")
		if err != nil {
			return err
		}
		if size == 0 || len(keys) == 0 {
			return fmt.Errorf("master %s holds %d keys, %d of this test", node.Options().Addr, size, len(keys))
		}
		mu.Lock()
		counts[node.Options().Addr] = len(keys)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	if len(counts) != 3 || total != 100 {
		t.Fatalf("keys per master %v; want 100 keys over 3 masters", counts)
	}

	script := redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'EX', 60)
redis.call('SET', KEYS[2], ARGV[1], 'EX', 60)
return redis.call('MGET', KEYS[1], KEYS[2])`)
	same := []string{p + "{tag}:a", p + "{tag}:b"}
	got, err := script.Run(ctx, cc, same, "x").StringSlice()
	if err != nil || len(got) != 2 || got[0] != "x" || got[1] != "x" {
		t.Fatalf("script on one hash tag: %q, %v", got, err)
	}
	apart := []string{p + "{one}:a", p + "{two}:b"}
	if s1, s2 := cc.ClusterKeySlot(ctx, apart[0]).Val(), cc.ClusterKeySlot(ctx, apart[1]).Val(); s1 == s2 {
		t.Fatalf("%q and %q share slot %d", apart[0], apart[1], s1)
	}
	if err := script.Run(ctx, cc, apart, "x").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("script on two hash tags: %v; want a CROSSSLOT error", err)
	}
}

// scanAll returns the keys of node matching pattern.
func scanAll(ctx context.Context, node *redis.Client, pattern string) ([]string, error) {
	var keys []string
	iter := node.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// TestClusterNodeRestart: a master killed and restarted on its port comes
// back with its slots (nodes.conf), and the cluster serves all of them.
func TestClusterNodeRestart(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("StartCluster: %v", time.Since(start).Round(time.Millisecond))
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs() = %v", c.Addrs())
	}
	node := c.Node(1)
	if err := node.Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	node.Restart(t)
	c.WaitHealthy(t)
	t.Logf("Restart + WaitHealthy: %v", time.Since(start).Round(time.Millisecond))
	slots, err := node.Client(t).ClusterSlots(context.Background()).Result()
	if err != nil || len(slots) != 3 {
		t.Fatalf("CLUSTER SLOTS on the restarted node: %v, %v", slots, err)
	}
	cc := c.Client(t)
	ctx := context.Background()
	p := KeyPrefix(t)
	for i := range 30 {
		k := fmt.Sprintf("%sk%d", p, i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s after the restart: %v", k, err)
		}
	}
}

func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	const goroutines, each = 8, 200
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				p := KeyPrefix(t)
				mu.Lock()
				if seen[p] {
					t.Errorf("KeyPrefix returned %q twice", p)
				}
				seen[p] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != goroutines*each {
		t.Fatalf("%d distinct prefixes, want %d", len(seen), goroutines*each)
	}
	t.Run("odd {name}: with spaces/and slashes "+strings.Repeat("x", 80), func(t *testing.T) {
		p := KeyPrefix(t)
		if strings.ContainsAny(p, "{} /") || !strings.HasSuffix(p, "x:") || len(p) > 64 {
			t.Fatalf("KeyPrefix = %q: want no braces, spaces or slashes, the name's end, bounded length", p)
		}
	})
}

// fakeTB records Skipf and Fatalf, which end the calling goroutine as the
// real ones do.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn(f) on a goroutine of its own and waits for it.
func (f *fakeTB) run(fn func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
}

// TestMissingBinary: a SLUICE_REDIS_SERVER that does not exist makes
// redis-server unavailable (the PATH is not tried); the harness then skips,
// or fails under SLUICE_REQUIRE_REDIS=1, and starts nothing.
func TestMissingBinary(t *testing.T) {
	t.Setenv(EnvServer, "/nonexistent/redis-server")
	if _, err := lookup(); err == nil {
		t.Fatal("redis-server found with a missing SLUICE_REDIS_SERVER")
	}
	const want = "redis-server not found; install it (apt-get install redis-server) or set SLUICE_REDIS_SERVER"

	t.Setenv(EnvRequire, "")
	for name, fn := range map[string]func(testing.TB){
		"Require":       Require,
		"Start":         func(tb testing.TB) { Start(tb, Config{}) },
		"StartCluster":  func(tb testing.TB) { StartCluster(tb) },
		"Shared":        func(tb testing.TB) { Shared(tb) },
		"SharedCluster": func(tb testing.TB) { SharedCluster(tb) },
	} {
		f := &fakeTB{}
		f.run(fn)
		if f.failed != "" || !strings.HasPrefix(f.skipped, want) || !strings.HasSuffix(f.skipped, "; skipping real-Redis test") {
			t.Errorf("%s: skipped %q, failed %q; want a skip explaining how to install redis-server", name, f.skipped, f.failed)
		}
	}

	t.Setenv(EnvRequire, "1")
	f := &fakeTB{}
	f.run(Require)
	if f.skipped != "" || !strings.HasPrefix(f.failed, want) || !strings.Contains(f.failed, EnvRequire+"=1") {
		t.Errorf("Require under %s=1: skipped %q, failed %q; want a failure", EnvRequire, f.skipped, f.failed)
	}
	t.Logf("the message: %s", f.failed)
}

func TestBinaryFromEnv(t *testing.T) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server on the PATH")
	}
	t.Setenv(EnvServer, path)
	if got, err := lookup(); got != path || err != nil {
		t.Fatalf("lookup() = %q, %v with %s=%s", got, err, EnvServer, path)
	}
	t.Setenv("PATH", t.TempDir())
	if got, err := lookup(); got != path || err != nil {
		t.Fatalf("lookup() = %q, %v with %s=%s and a PATH without redis-server", got, err, EnvServer, path)
	}
	t.Setenv(EnvServer, "")
	if _, err := lookup(); err == nil {
		t.Fatal("redis-server found with neither the variable nor redis-server on the PATH")
	}
}

// TestLaunchOutsideATest: the entry point of commands starts a server that
// answers, and its stop stops it and removes its directory.
func TestLaunchOutsideATest(t *testing.T) {
	Require(t)
	s, stop, err := Launch(Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(s.Options())
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	dir := s.dir
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !s.proc.exited() {
		t.Error("running after stop")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("directory %s: %v; want it removed", dir, err)
	}
}

// TestLaunchClusterOutsideATest: the cluster entry point of commands
// starts a cluster that serves every master, and its stop kills the nodes
// and removes their directories.
func TestLaunchClusterOutsideATest(t *testing.T) {
	Require(t)
	c, stop, err := LaunchCluster()
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	ctx := context.Background()
	for _, key := range probeKeys {
		if err := cc.Set(ctx, key, "ok", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	for i := range 3 {
		n := c.Node(i)
		if !n.proc.exited() {
			t.Errorf("node %d running after stop", i)
		}
		if _, err := os.Stat(n.dir); !os.IsNotExist(err) {
			t.Errorf("node %d's directory %s: %v; want it removed", i, n.dir, err)
		}
	}
}
