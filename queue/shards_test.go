package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/keyspace"
)

// TestShardsKeepTheBound: a queue of four shards, each under its own hash
// tag with its own asynq queue, bound to 20 jobs. Concurrent producers for
// many tenants get exactly 20 in, each shard its share of 5; every job
// runs once, from its tenant's shard; the counts add up across shards.
func TestShardsKeepTheBound(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 20)
		cfg.Shards = 4
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		var accepted, full atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 25 {
					_, err := p.Enqueue(ctx, Job{Tenant: fmt.Sprintf("t%d", (g*25+i)%40), Type: "x"})
					var qf *QueueFullError
					switch {
					case err == nil:
						accepted.Add(1)
					case errors.As(err, &qf):
						if qf.Bound != 5 {
							t.Errorf("a shard refused at a bound of %d; want its share, 5", qf.Bound)
						}
						full.Add(1)
					default:
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		if accepted.Load() != 20 || full.Load() != 180 {
			t.Fatalf("accepted %d, refused %d; want 20 and 180", accepted.Load(), full.Load())
		}
		st, err := p.Stats(ctx)
		if err != nil || st.Depth != 20 {
			t.Fatalf("stats %+v, %v; want depth 20", st, err)
		}

		var mu sync.Mutex
		runs := map[string]int{}
		h := HandlerFunc(func(ctx context.Context, j *Job) error {
			name, _ := getQueueName(ctx)
			if want := p.shards.of(mustEncode(t, j.Tenant)).queue; name != want {
				t.Errorf("tenant %s's job ran from asynq queue %q; want its shard's, %q", j.Tenant, name, want)
			}
			mu.Lock()
			defer mu.Unlock()
			runs[j.ID]++
			return nil
		})
		startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 4}, h)
		waitFor(t, 30*time.Second, "the 20 jobs", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(runs) == 20
		})
		for id, n := range runs {
			if n != 1 {
				t.Errorf("job %s ran %d times", id, n)
			}
		}
		waitFor(t, 10*time.Second, "an empty queue", func() bool {
			st, err := p.Stats(ctx)
			return err == nil && st.Depth == 0 && st.Tenants == 0
		})
	})
}

// TestShardCountIsFixed: a queue keeps the shard count it was first used
// with; a producer or a server configured with another is refused, so no
// tenant moves away from jobs that would then never be drained.
func TestShardCountIsFixed(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		cfg := testConfig(t, 100)
		cfg.Shards = 3
		p, err := NewProducer(client, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(ctx, Job{Tenant: "a", Type: "x"}); err != nil {
			t.Fatal(err)
		}
		other := cfg
		other.Shards = 2
		p2, err := NewProducer(client, &other)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p2.Enqueue(ctx, Job{Tenant: "a", Type: "x"}); !errors.Is(err, ErrShardsChanged) {
			t.Fatalf("enqueue with 2 shards to a queue of 3: %v; want ErrShardsChanged", err)
		}
		s, err := NewServer(client, &ServerConfig{Queue: other.Queue, Prefix: other.Prefix, Shards: other.Shards, clock: other.clock})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(HandlerFunc(func(context.Context, *Job) error { return nil })); !errors.Is(err, ErrShardsChanged) {
			s.Shutdown()
			t.Fatalf("a server with 2 shards on a queue of 3 started: %v", err)
		}
		if st, err := p.Stats(ctx); err != nil || st.Depth != 1 {
			t.Fatalf("stats %+v, %v; want the one job", st, err)
		}
	})
}

func getQueueName(ctx context.Context) (string, bool) { return asynq.GetQueueName(ctx) }

func mustEncode(t *testing.T, tenant string) string {
	t.Helper()
	_, enc, _, err := shards{keys{}}.tenant(tenant)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// TestShardsSpreadOverSlots: shard i of n lies in the i-th n-th of the
// cluster's hash slots, whatever the queue's name, so the shards spread
// evenly over the masters; the names are the same each time.
func TestShardsSpreadOverSlots(t *testing.T) {
	for _, q := range []string{"scale", "q", "orders-eu", "x.y_z"} {
		for _, n := range []int{2, 3, 6, 12, 64, MaxShards} {
			s := newShards("sluice:q", q, n)
			for i, k := range s {
				slot := keyspace.Slot(k.queue)
				if slot < i*keyspace.Slots/n || slot >= (i+1)*keyspace.Slots/n {
					t.Errorf("%s, shard %d of %d (%s): slot %d outside its share", q, i, n, k.queue, slot)
				}
				if k.queue != shardName(q, i, n) || !strings.HasPrefix(k.queue, q+":"+strconv.Itoa(i)) {
					t.Errorf("%s, shard %d of %d: named %s", q, i, n, k.queue)
				}
			}
		}
	}
}
