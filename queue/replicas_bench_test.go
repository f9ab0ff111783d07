package queue

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkEnqueueReplicas enqueues on a primary with one replica, with
// and without Replicas 1 (WAIT in the enqueue's round trip), from one
// producer goroutine and from 16 at once; jobs/s is the figure
// docs/reliability.md quotes, as a ratio of the two:
//
//	go test -run '^$' -bench EnqueueReplicas -benchtime 3000x ./queue
func BenchmarkEnqueueReplicas(b *testing.B) {
	s := redistest.StartSentinel(b, redistest.SentinelConfig{})
	client := redis.NewClient(s.Servers()[0].Options())
	b.Cleanup(func() { client.Close() })
	var n atomic.Int64
	for _, replicas := range []int{0, 1} {
		p, err := NewProducer(client, &Config{Queue: "bench" + strconv.Itoa(replicas), Bound: 1 << 30, Replicas: replicas})
		if err != nil {
			b.Fatal(err)
		}
		enqueue := func(b *testing.B) {
			i := n.Add(1)
			if _, err := p.Enqueue(context.Background(), Job{Tenant: "t" + strconv.FormatInt(i%100, 10), Type: "x", ID: strconv.FormatInt(i, 10)}); err != nil {
				b.Fatal(err)
			}
		}
		name := "replicas=" + strconv.Itoa(replicas)
		b.Run(name+"/producers=1", func(b *testing.B) {
			for b.Loop() {
				enqueue(b)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
		b.Run(name+"/producers=16", func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					enqueue(b)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
