package throttle

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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

// TestClockSampleKeepsQuickestReply: of a sample's round trips, the one
// that came back quickest sets the offset, since it says most closely
// when Redis read its clock; round trips all slower than clockSampleRTT
// keep the estimate as it was. Redis's clock is fixed (miniredis) and the
// host's stepped, so each round trip's length and midpoint are exact.
func TestClockSampleKeepsQuickestReply(t *testing.T) {
	m := miniredis.RunT(t)
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	m.SetTime(at)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	th := newThrottle(t, client, nil, nil)
	steps := func(ds ...time.Duration) {
		i := 0
		th.hostNow = func() time.Time { i++; return at.Add(ds[i-1]) }
	}
	ctx := context.Background()
	// Round trips of 40 ms (midpoint 10 ms early: offset +10 ms), 2 ms
	// (midpoint on time: 0) and 44 ms (midpoint 2 ms late: -2 ms).
	steps(-30*ms, 10*ms, -1*ms, 1*ms, -20*ms, 24*ms)
	if !th.sampleServerClock(ctx) || th.srvClock.offset != 0 {
		t.Fatalf("offset %v, want 0 (the 2 ms round trip's)", th.srvClock.offset)
	}
	steps(-100*ms, 0, -60*ms, 0, 0, 70*ms)
	if th.sampleServerClock(ctx) || th.srvClock.offset != 0 {
		t.Fatalf("round trips of 100, 60 and 70 ms: kept, offset %v; want the old 0 kept", th.srvClock.offset)
	}
}
