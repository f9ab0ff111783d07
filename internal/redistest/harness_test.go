package redistest

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestHarnessStandaloneRestartKeepsData(t *testing.T) {
	s := Start(t, Config{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if c.Ping(ctx).Err() == nil {
		t.Fatal("server still answers after Kill")
	}
	s.Restart(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart: %q, %v; want the key kept by the AOF", v, err)
	}
}

func TestHarnessCluster(t *testing.T) {
	cc := SharedCluster(t)
	ctx := context.Background()
	p := KeyPrefix(t)
	for i := 0; i < 100; i++ {
		if err := cc.Set(ctx, p+string(rune('a'+i%26))+strings.Repeat("x", i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	masters := 0
	shared.mu.Lock()
	nodes := shared.cluster.nodes
	shared.mu.Unlock()
	for _, n := range nodes {
		c := n.Client(t)
		if c.DBSize(ctx).Val() > 0 {
			masters++
		}
	}
	if masters != 3 {
		t.Fatalf("keys landed on %d masters; want 3", masters)
	}
	// One hash tag: a multi-key script works. Two: CROSSSLOT.
	script := "return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)"
	if err := cc.Eval(ctx, script, []string{"{same}a", "{same}b"}).Err(); err != nil {
		t.Fatalf("same slot: %v", err)
	}
	err := cc.Eval(ctx, script, []string{"{one}a", "{two}b"}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("different slots: %v; want CROSSSLOT", err)
	}
}

func TestHarnessKeyPrefixUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		p := KeyPrefix(t)
		if seen[p] {
			t.Fatalf("prefix %q twice", p)
		}
		seen[p] = true
	}
}

func TestHarnessMissingBinary(t *testing.T) {
	t.Setenv("SLUICE_REDIS_SERVER", "/nonexistent/redis-server")
	if Available() {
		t.Fatal("Available with a missing binary")
	}
}
