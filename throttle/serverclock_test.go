package throttle

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// TestClaimedLateOnServerClock: whether a claimed slot is too late to use
// is judged on Redis's clock, whatever the host's says: on hosts 3 s
// ahead and 3 s behind Redis, a slot due now is used and a slot a second
// old is refused (counted late), once the throttle has measured the
// offset; and the first Claimed starts that measurement by itself.
func TestClaimedLateOnServerClock(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		ctx := context.Background()
		lim := Limit{Name: "api", Rate: 100} // a late slot may be 5 ms late
		for _, skew := range []time.Duration{3 * time.Second, -3 * time.Second} {
			th := newThrottle(t, client, nil, nil)
			th.hostNow = func() time.Time { return time.Now().Add(skew) }
			redisNow := func() int64 {
				t.Helper()
				tm, err := client.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				return tm.UnixMicro()
			}
			// The first use starts a sample in the background.
			th.Claimed("api", lim, 1, redisNow()+time.Hour.Microseconds(), 0)
			th.wg.Wait() // the sample, the one goroutine of a throttle that does not subscribe
			if off := th.srvClock.offset + skew; off < -clockSampleRTT || off > clockSampleRTT {
				t.Fatalf("host %v off Redis: the offset measured is %v", skew, th.srvClock.offset)
			}
			late := func() float64 {
				return testutil.ToFloat64(th.metrics.reservations.WithLabelValues(cmp.Or(lim.Name, "default"), "late"))
			}
			if _, ok := th.Claimed("api", lim, 1, redisNow()+2000, 2000); !ok {
				t.Errorf("host %v off Redis: a slot 2 ms ahead was refused", skew)
			}
			if _, ok := th.Claimed("api", lim, 1, redisNow()-time.Second.Microseconds(), 0); ok || late() != 1 {
				t.Errorf("host %v off Redis: a slot a second old: used %v, late counted %v; want refused, and 1", skew, ok, late())
			}
		}
	})
}
