package queue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// cmdCount counts the commands a client sends (pipelines and scripts
// included, a script as one).
type cmdCount struct{ n atomic.Int64 }

func (c *cmdCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *cmdCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// BenchmarkInspector100k: one tenant with 100,000 jobs waiting on a real
// redis-server; a page of 100 from the middle of its list, and the why of
// the job in the middle. It reports the commands each sends: the same
// whatever the depth (O(page) for the page). Redis's LRANGE skips to its
// start a quicklist node (many entries) at a time: a page at the list's
// head, middle and tail cost about the same.
func BenchmarkInspector100k(b *testing.B) {
	ctx := context.Background()
	client := redistest.Start(b, redistest.Config{}).Client(b)
	cfg := Config{Queue: "bench-inspect", Bound: 1 << 40}
	p, err := NewProducer(client, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	const n = 100_000
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				if _, err := p.Enqueue(ctx, Job{ID: fmt.Sprint("job-", i), Tenant: "acme", Type: "x"}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	k := p.shards[0]
	recs, _ := client.MemoryUsage(ctx, k.jobs, 0).Result()
	list, _ := client.MemoryUsage(ctx, k.tenantPrefix+"=acme", 0).Result()
	b.Logf("MEMORY USAGE: the jobs hash %d B (%.0f B a job), the tenant's list %d B (%.0f B a job)", recs, float64(recs)/n, list, float64(list)/n)
	in, err := NewInspector(client, &InspectorConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock})
	if err != nil {
		b.Fatal(err)
	}
	var cc cmdCount
	client.AddHook(&cc)
	// The job at index 50,000: the producers enqueued concurrently, so
	// read its id from the list.
	pg, err := in.List(ctx, "acme", ListOptions{Cursor: "50000", Limit: 1})
	if err != nil || len(pg.Jobs) != 1 {
		b.Fatal(pg, err)
	}
	mid := pg.Jobs[0].ID
	for _, at := range []string{"0", "50000", "99900"} {
		b.Run("list-page-100-at-"+at, func(b *testing.B) {
			cc.n.Store(0)
			for b.Loop() {
				pg, err := in.List(ctx, "acme", ListOptions{Cursor: at, Limit: 100})
				if err != nil || len(pg.Jobs) != 100 || pg.Total != n {
					b.Fatal(pg.Total, len(pg.Jobs), err)
				}
			}
			b.ReportMetric(float64(cc.n.Load())/float64(b.N), "cmds/op")
		})
	}
	b.Run("why-at-50000", func(b *testing.B) {
		cc.n.Store(0)
		for b.Loop() {
			info, err := in.Job(ctx, "acme", mid)
			if err != nil || info.Ahead != 50000 || !info.AheadExact {
				b.Fatal(info, err)
			}
		}
		b.ReportMetric(float64(cc.n.Load())/float64(b.N), "cmds/op")
	})
}
