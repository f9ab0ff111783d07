package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/scripts"
)

// BenchmarkClaimScript measures the scripts of the hand-over in the steady
// state of a busy worker: a claim takes a batch of jobs from tenants
// tenants, and the clearing script ends their hand-over. It reports
// redis-server's own time per job (INFO commandstats): the cost of taking
// a job out of the waiting room, to add to the cost of writing its task
// with asynq's Client (BenchmarkEnqueueScript's asynq-redis-µs/job). With marked, every job names a downstream and
// another downstream is marked full, so that the claim checks each job's
// marks (and finds none).
func BenchmarkClaimScript(b *testing.B) {
	for _, tenants := range []int{1, 1000} {
		for _, batch := range []int{5, 10, 20, 32} {
			for _, marked := range []bool{false, true} {
				b.Run(fmt.Sprintf("tenants=%d/batch=%d/marked=%v", tenants, batch, marked), func(b *testing.B) {
					benchClaim(b, tenants, batch, marked)
				})
			}
		}
	}
}

func benchClaim(b *testing.B, tenants, batch int, marked bool) {
	ctx := context.Background()
	client := redistest.Start(b, redistest.Config{}).Client(b) // its own: the benchmark flushes it
	cfg := Config{Queue: "bench-claim", Bound: 1 << 40}
	p, err := NewProducer(client, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	k := p.shards[0]
	claim := func() []any {
		v, err := scripts.QueueClaim.Run(ctx, client,
			[]string{k.ring, k.sleep, k.members, k.weights, k.turns, k.meta, k.cdepth, k.ids, k.asynqPending, k.why, k.later, k.ldepth, k.full, k.held, k.handing},
			batch, k.tenantPrefix, "", batch, idHold.Microseconds(), handingStale.Microseconds()).Slice()
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	// cleared plays the dispatcher's second step, without asynq: the
	// entries leave the handing set (queue_handed.lua).
	cleared := func(entries []any) {
		args := make([]any, 0, 2*len(entries))
		for _, e := range entries {
			args = append(args, e, defaultClass)
		}
		if err := scripts.QueueHanded.Run(ctx, client, []string{k.handing, k.meta, k.cdepth}, args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	payload := []byte(strings.Repeat("x", 64))
	var handed, usec int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if i%20 == 0 {
			if err := client.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			job := Job{Type: "noop", Payload: payload}
			if marked {
				job.Downstream = "api"
				if err := client.ZAdd(ctx, k.full, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMicro()), Member: "other"}).Err(); err != nil {
					b.Fatal(err)
				}
			}
			for j := 0; j < 20*batch; j++ {
				job.Tenant = fmt.Sprintf("t%d", j%tenants)
				if _, err := p.Enqueue(ctx, job); err != nil {
					b.Fatal(err)
				}
			}
		}
		before := evalUsec(b, client)
		b.StartTimer()
		v := claim()
		if v[0] != claimTaken {
			b.Fatalf("claim: %v", v)
		}
		cleared(v[4:])
		b.StopTimer()
		usec += evalUsec(b, client) - before
		handed += v[1].(int64)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(usec)/float64(handed), "redis-µs/job")
	b.ReportMetric(float64(handed)/float64(b.N), "jobs/claim")
}

// evalUsec returns redis-server's total time in EVALSHA and EVAL, µs.
func evalUsec(b *testing.B, c *redis.Client) int64 {
	_, usec := redistest.ScriptTime(context.Background(), b, c)
	return usec
}

// BenchmarkEnqueueScript measures redis-server's own time per Enqueue (the
// admission and enqueue script, a token bucket that admits everything)
// beside that of asynq's Client.Enqueue on the same server, as
// "redis-µs/job" and "asynq-redis-µs/job": the server's share of the
// enqueue benchmark in bench/cmd/queue, without the clients' noise.
func BenchmarkEnqueueScript(b *testing.B) {
	ctx := context.Background()
	client := redistest.Start(b, redistest.Config{}).Client(b) // its own: the benchmark flushes it
	pol := algorithms.Policy{Algorithm: algorithms.TokenBucket, Limit: 1_000_000_000, Period: time.Second}
	cfg := Config{Queue: "bench-enqueue", Bound: 1 << 40, Tenants: func(string) TenantPolicy { return TenantPolicy{Admission: &pol} }}
	p, err := NewProducer(client, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	ac := asynq.NewClientFromRedisClient(client)
	defer ac.Close()
	payload := []byte(strings.Repeat("x", 64))
	if err := client.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	before := evalUsec(b, client)
	for i := 0; i < b.N; i++ {
		if _, err := p.Enqueue(ctx, Job{Tenant: fmt.Sprintf("t%d", i%100), Type: "noop", Payload: payload}); err != nil {
			b.Fatal(err)
		}
	}
	ours := evalUsec(b, client) - before
	b.StopTimer()
	before = evalUsec(b, client)
	for i := 0; i < b.N; i++ {
		if _, err := ac.EnqueueContext(ctx, asynq.NewTask("noop", payload)); err != nil {
			b.Fatal(err)
		}
	}
	theirs := evalUsec(b, client) - before
	b.ReportMetric(float64(ours)/float64(b.N), "redis-µs/job")
	b.ReportMetric(float64(theirs)/float64(b.N), "asynq-redis-µs/job")
}
