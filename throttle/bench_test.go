package throttle

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// baselineScript is the least a shared GCRA bucket can cost the server: one
// GET, the arithmetic, one SET PX, in one script, as go-redis/redis_rate
// and the like do. BenchmarkReserveScript reports Reserve's server time
// against it.
var baselineScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local iv, tol = tonumber(ARGV[1]), tonumber(ARGV[2])
if tat < now then tat = now end
local new = tat + iv
local delay = new - tol - now
if delay < 0 then delay = 0 end
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000) + 1)
return {1, delay}
`)

// BenchmarkReserveScript measures what one Reserve costs redis-server, in
// the per-tenant shape: every key its own bucket of 2/s, burst 40, one
// unit a call, the calls spread round-robin over the keys. It reports
//
//	redis-µs/op  the server's time in the reserve script per call
//	base-µs/op   the same for baselineScript, run as many times on as
//	             many keys of their own after the Reserve calls
//	ratio        redis-µs/op over base-µs/op
//
// and ns/op and allocs/op of the whole call as the worker sees it. MaxWait
// is long so that a key that gets many calls (keys=1) keeps booking, as a
// backlog does, rather than taking the cheaper refusal path. Run it with
//
//	SLUICE_REQUIRE_REDIS=1 go test -run '^$' -bench BenchmarkReserveScript -benchtime 20000x ./throttle/
func BenchmarkReserveScript(b *testing.B) {
	srv := redistest.Start(b, redistest.Config{})
	ctx := context.Background()
	for _, keys := range []int{1, 100, 10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			c := srv.Client(b)
			if err := c.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			th, err := New(c, &Options{Prefix: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer th.Close()
			lim := Limit{Rate: 2, Burst: 40, MaxWait: 1000 * time.Hour}
			names := make([]string, keys)
			for i := range names {
				names[i] = "tenant-" + strconv.Itoa(i)
			}
			// Load both scripts, so that neither run counts an EVAL's compile.
			if _, err := th.Reserve(ctx, "warm", lim, 1); err != nil {
				b.Fatal(err)
			}
			if err := baselineScript.Load(ctx, c).Err(); err != nil {
				b.Fatal(err)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := th.Reserve(ctx, names[i%keys], lim, 1)
				if err != nil {
					b.Fatal(err)
				}
				if !r.OK {
					b.Fatalf("call %d: no slot: %v", i, r)
				}
			}
			b.StopTimer()
			calls, usec := redistest.ScriptTime(ctx, b, c)
			if calls != int64(b.N) {
				b.Fatalf("%d script calls for %d reservations", calls, b.N)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			iv, tol := strconv.FormatInt(500_000, 10), strconv.FormatInt(39*500_000, 10)
			for i := 0; i < b.N; i++ {
				if err := baselineScript.Run(ctx, c, []string{"base:" + names[i%keys]}, iv, tol).Err(); err != nil {
					b.Fatal(err)
				}
			}
			bcalls, busec := redistest.ScriptTime(ctx, b, c)
			per, base := float64(usec)/float64(calls), float64(busec)/float64(bcalls)
			b.ReportMetric(per, "redis-µs/op")
			b.ReportMetric(base, "base-µs/op")
			b.ReportMetric(per/base, "ratio")
		})
	}
}
