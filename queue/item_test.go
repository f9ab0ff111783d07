package queue

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// TestEntryHeaderReadByName: an entry written by hand in the grammar of
// docs/queue.md (Entries), its header's fields in another order than
// Job.item writes them and with a field of another name among them, is
// read by name on both sides: Go decodes its job, and the claim takes
// its downstream from the header (a tenant whose downstream is marked
// full sleeps, its job left in its list), then, the mark gone, hands it
// over with its class and task id, its envelope the task's payload.
func TestEntryHeaderReadByName(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg, p := testProducer(t, client, 100)
		k := p.shards[0]
		enc, list, err := k.tenant("a")
		if err != nil {
			t.Fatal(err)
		}
		j := Job{ID: "by-hand", Tenant: "a", Type: "x", Downstream: "api", nonce: "00ff00ff00ff00ff", class: "gold"}
		env, err := j.encode()
		if err != nil {
			t.Fatal(err)
		}
		task := j.taskID()
		msg := env
		it := entryMarker + "\tdownstream=api\tnote=written by hand\ttask=" + task + "\tclass=gold\n" + msg

		if h, m, ok := readEntry(it); !ok || h != (header{class: "gold", downstream: "api", task: task}) || string(m) != msg {
			t.Fatalf("readEntry: %+v, %q, %v", h, m, ok)
		}
		if got, err := decodeItem(it); err != nil || got.ID != j.ID || got.Tenant != "a" || got.Downstream != "api" {
			t.Fatalf("decodeItem: %+v, %v", got, err)
		}

		// In the waiting room as an enqueue leaves it.
		pipe := client.TxPipeline()
		pipe.RPush(ctx, list, it)
		pipe.HIncrBy(ctx, k.meta, "depth", 1)
		pipe.HIncrBy(ctx, k.cdepth, "gold", 1)
		pipe.SAdd(ctx, k.members, enc)
		pipe.RPush(ctx, k.ring, enc)
		pipe.ZAdd(ctx, k.full, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMicro()), Member: "api"})
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		s, err := NewServer(client, &ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.claim(ctx, s.disp[0]); err != nil {
			t.Fatal(err)
		}
		if head, err := client.LIndex(ctx, list, 0).Result(); err != nil || head != it {
			t.Fatalf("with api marked full, the list's head is %q (%v); want the entry, untouched", head, err)
		}
		if _, err := client.ZScore(ctx, k.sleep, enc).Result(); err != nil {
			t.Fatalf("with api marked full, the tenant does not sleep: %v", err)
		}

		// The mark gone and the tenant awake, the claim hands it over.
		if err := client.ZRem(ctx, k.full, "api").Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.ZAdd(ctx, k.sleep, redis.Z{Score: 0, Member: enc}).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.claim(ctx, s.disp[0]); err != nil {
			t.Fatal(err)
		}
		ti, err := asynq.NewInspectorFromRedisClient(client).GetTaskInfo(k.queue, task)
		if err != nil || string(ti.Payload) != msg || ti.State != asynq.TaskStatePending {
			t.Fatalf("asynq's task %s: %+v, %v; want the entry's envelope as it is, pending", task, ti, err)
		}
		if n, err := client.LLen(ctx, list).Result(); err != nil || n != 0 {
			t.Fatalf("%d entries left in the list (%v)", n, err)
		}
		if n, err := client.HGet(ctx, k.cdepth, "gold").Result(); err != redis.Nil {
			t.Fatalf("class gold still counts %q (%v); want it gone", n, err)
		}
	})
}
