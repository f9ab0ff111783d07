package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSentinelFailover: the harness's Sentinels promote the replica when
// the primary is killed, and a failover client follows them.
func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t, SentinelConfig{Password: "srv-pw", SentinelPassword: "sen-pw"})
	old := s.Primary(t, nil)
	if old != s.Servers()[0] {
		t.Fatalf("the primary at start is %s, want %s", old.Addr(), s.Servers()[0].Addr())
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs(),
		Password: "srv-pw", SentinelPassword: "sen-pw"})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d replicas, %v", n, err)
	}
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	promoted := s.Primary(t, old)
	if promoted != s.Servers()[1] {
		t.Fatalf("promoted %s, want the replica %s", promoted.Addr(), s.Servers()[1].Addr())
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := c.Get(ctx, "k").Result()
		if err == nil {
			if v != "before" {
				t.Fatalf("k is %q after the failover, want before", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failover client did not follow the new primary: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Set(ctx, "k", "after", 0).Err(); err != nil {
		t.Fatalf("writing to the new primary: %v", err)
	}
}
