package bench

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/bench/internal/admission"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The same matrix as `go run ./cmd/admission`, as standard benchmarks:
//
//	go test -run '^$' -bench . -benchtime 3s
//
// ns/op is wall time per decision over all callers (the inverse of the
// throughput); p50-ns and p99-ns are one call's latency as a caller sees it.
var concFlag = flag.String("admission.conc", "1,8,64", "comma-separated numbers of concurrent callers")

func concurrencies(b *testing.B) []int {
	var cs []int
	for f := range strings.SplitSeq(*concFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-admission.conc: %q is not a positive number", f)
		}
		cs = append(cs, n)
	}
	return cs
}

// TestMain stops the shared redis-server that every benchmark of this
// binary runs against, so that sluice and redis_rate meet the same server.
// The benchmarks are its only users: their keys (sluice:rl:*, rate:*) are
// theirs, and nothing flushes it.
func TestMain(m *testing.M) { redistest.Main(m) }

// client returns a client of the shared server whose pool holds a
// connection for every caller, so that callers wait on Redis, not on the
// pool.
func client(b *testing.B) *redis.Client {
	b.Helper()
	addr := redistest.Shared(b).Options().Addr // skips without redis-server
	most := 1
	for _, c := range concurrencies(b) {
		most = max(most, c)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: most + 4})
	b.Cleanup(func() { c.Close() })
	return c
}

func BenchmarkAdmission(b *testing.B) {
	c := client(b)
	for _, alg := range algorithms.Algorithms {
		t, err := admission.Sluice(c, alg, admission.DefaultLimit, admission.DefaultPeriod, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(alg), func(b *testing.B) { benchTarget(b, t) })
	}
}

func BenchmarkRedisRate(b *testing.B) {
	benchTarget(b, admission.Baseline(client(b), admission.DefaultLimit, admission.DefaultPeriod))
}

func benchTarget(b *testing.B, t admission.Target) {
	ids := admission.KeyIDs(admission.DefaultKeys)
	for _, conc := range concurrencies(b) {
		b.Run(fmt.Sprintf("c%d", conc), func(b *testing.B) {
			b.ReportAllocs()
			r := admission.Run(context.Background(), t, admission.Load{
				Concurrency: conc,
				Calls:       int64(b.N),
				IDs:         ids,
				Seed:        uint64(conc),
			})
			b.StopTimer()
			if r.Errors > 0 {
				b.Fatalf("%d of %d calls failed; first: %v", r.Errors, r.Calls, r.FirstErr)
			}
			b.ReportMetric(float64(r.Quantile(0.50).Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(r.Quantile(0.99).Nanoseconds()), "p99-ns")
			b.ReportMetric(r.PerSecond(), "decisions/s")
		})
	}
}
