package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// TestRefusedJobEnds: a job its downstream always refuses (the handler
// returns Refused, as the HTTP job does on a 429) is put back without
// spending a retry until the downstream's MaxRefusals (3, or
// DefaultMaxRefusals when unset), then archived with an error that says
// why and counted in sluice_queue_refused_archived_total; another
// tenant's jobs on the same downstream run.
func TestRefusedJobEnds(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, c := range []struct{ set, want int }{{3, 3}, {0, DefaultMaxRefusals}} {
			t.Run(fmt.Sprintf("max_refusals=%d", c.set), func(t *testing.T) {
				cfg := testConfig(t, 100)
				p, err := NewProducer(client, &cfg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := p.Enqueue(context.Background(), Job{ID: "stuck", Tenant: "a", Type: "call", Downstream: "api"}); err != nil {
					t.Fatal(err)
				}
				const others = 5
				for range others {
					if _, err := p.Enqueue(context.Background(), Job{Tenant: "b", Type: "call", Downstream: "api"}); err != nil {
						t.Fatal(err)
					}
				}
				th := testThrottle(t, client, nil)
				metrics, err := NewMetrics(nil, cfg.Queue)
				if err != nil {
					t.Fatal(err)
				}
				d := Downstream{Limit: throttle.Limit{Name: "api", Rate: 1000}, MaxRefusals: c.set}
				rec := newRecorder()
				var seen []int // the stuck job's Refusals at each run
				rec.err = func(j *Job) error {
					if j.Tenant != "a" {
						return nil
					}
					rec.mu.Lock()
					seen = append(seen, j.Refusals())
					rec.mu.Unlock()
					return Refused(10*time.Millisecond, "HTTP 429 from api.example")
				}
				srv := startServer(t, client, ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, clock: cfg.clock, Concurrency: 2, Throttle: th, Metrics: metrics,
					Downstreams: func(name string) (Downstream, bool) { return d, name == "api" }}, rec)
				ins := asynq.NewInspectorFromRedisClient(client)
				var archived []*asynq.TaskInfo
				waitFor(t, 30*time.Second, "the stuck job archived", func() bool {
					archived, err = ins.ListArchivedTasks(srv.cfg.Queue)
					return err == nil && len(archived) > 0
				})
				waitFor(t, 30*time.Second, "the other tenant's jobs", func() bool { return rec.count() >= others+c.want })
				if len(archived) != 1 || archived[0].Retried != 0 {
					t.Fatalf("archived %d tasks (the first with %d retries spent); want the stuck job, none spent", len(archived), archived[0].Retried)
				}
				want := fmt.Sprintf(`job stuck of tenant "a": downstream "api" refused it %d times (max_refusals); the last: HTTP 429 from api.example`, c.want)
				if e := archived[0].LastErr; !strings.Contains(e, ErrRefusedTooOften.Error()) || !strings.Contains(e, want) {
					t.Fatalf("archived with %q; want %q", e, want)
				}
				rec.mu.Lock()
				runs := rec.runs["stuck"]
				got := append([]int(nil), seen...)
				rec.mu.Unlock()
				if runs != c.want || len(got) != c.want || got[0] != 0 || got[len(got)-1] != c.want-1 {
					t.Fatalf("the stuck job ran %d times, having been refused %v times before each run; want %d runs", runs, got, c.want)
				}
				if n := testutil.ToFloat64(metrics.refusedOut.WithLabelValues("api")); n != 1 {
					t.Fatalf("sluice_queue_refused_archived_total{downstream=api} = %v; want 1", n)
				}
			})
		}
	})
}
