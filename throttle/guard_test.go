package throttle

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// apiBucket is an API's leaky bucket as Shopify documents it, metered at
// each call's arrival: it holds up to size calls, drains one every
// interval, and refuses (adding nothing) a call that would overflow it.
type apiBucket struct {
	size     int64
	interval time.Duration
	level    time.Duration // the calls held, in intervals' worth of time
	at       time.Duration // when level was last brought up to date
}

// call reports whether a call arriving at t fits; arrivals come in order.
func (b *apiBucket) call(t time.Duration) bool {
	b.level = max(b.level-(t-b.at), 0)
	b.at = t
	if b.level+b.interval > time.Duration(b.size)*b.interval {
		return false
	}
	b.level += b.interval
	return true
}

// refusals feeds calls of one unit arriving at the given times, in order
// of arrival, to b and returns the ones it refuses, counted from 1 in the
// order given.
func (b *apiBucket) refusals(arrivals []time.Duration) []int {
	order := make([]int, len(arrivals))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(arrivals[a] - arrivals[b]) })
	var refused []int
	for _, i := range order {
		if !b.call(arrivals[i]) {
			refused = append(refused, i+1)
		}
	}
	slices.Sort(refused)
	return refused
}

// TestBurstLagAtTheSwitch: a per-tenant key set to Shopify's bucket
// (rate 2/s, burst 40) against an API that enforces exactly that. The
// burst's units start at once and the pace after them is 2/s, as the
// API's bucket allows; but the burst's calls, sent in a rush, reach the
// API a few ms later than the paced calls after them do. Without the
// guard the first paced call finds the API's bucket still full by that
// spread and is refused; with it, the paced calls start Guard (250 ms,
// half of the 500 ms interval) later than the bucket alone
// would allow, and no call is refused while the spread stays under the
// guard (Limit.Guard 250 ms; none by default). Three ways the calls come: all booked at once (a backlog); the
// burst at once and then each call booked as it is made, at the API's
// pace; and booked as made 20 ms apart, so that the bucket fills slowly
// and the 42nd call is the first that must wait for room.
func TestBurstLagAtTheSwitch(t *testing.T) {
	type pattern struct {
		name   string
		made   func(i int) time.Duration // when call i (from 0) is booked
		atOnce int                       // the calls that start when booked: the burst
		paced  time.Duration             // the first paced call's slot without the guard
	}
	patterns := []pattern{
		{"booked at once", func(int) time.Duration { return 0 }, 40, 500 * ms},
		{"paced calls booked as made", func(i int) time.Duration { return time.Duration(max(i-39, 0)) * 500 * ms }, 40, 500 * ms},
		{"filling slowly", func(i int) time.Duration { return time.Duration(i) * 20 * ms }, 41, 1000 * ms},
	}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, c := range []struct {
			name               string
			guard              time.Duration // Limit.Guard
			burstLag, pacedLag time.Duration
			refused            int
		}{
			{"the guard, burst 5ms later than pace", 250 * ms, 6 * ms, 1 * ms, 0},
			{"the guard, burst 249ms later than pace", 250 * ms, 250 * ms, 1 * ms, 0},
			{"the guard, burst 300ms later than pace", 250 * ms, 301 * ms, 1 * ms, 1},
			{"no guard, burst 5ms later than pace", 0, 6 * ms, 1 * ms, 1},
			{"no guard, the same lag for every call", 0, 3 * ms, 3 * ms, 0},
		} {
			for _, p := range patterns {
				t.Run(c.name+", "+p.name, func(t *testing.T) {
					clock := &fakeClock{t: base}
					th := newThrottle(t, client, clock.Now, nil)
					lim := Limit{Rate: 2, Burst: 40, MaxWait: time.Hour, Guard: c.guard}
					var slots, arrivals []time.Duration
					for i := range 60 {
						clock.Set(p.made(i))
						r, err := th.Reserve(context.Background(), "shop-1", lim, 1)
						if err != nil || !r.OK {
							t.Fatalf("call %d: %+v, %v", i+1, r, err)
						}
						slot := p.made(i) + r.Delay
						lag := c.pacedLag
						if i < p.atOnce {
							lag = c.burstLag
						}
						slots, arrivals = append(slots, slot), append(arrivals, slot+lag)
					}
					if got := (&apiBucket{size: 40, interval: 500 * ms}).refusals(arrivals); len(got) != c.refused {
						t.Fatalf("the API refused calls %v; want %d refusal(s)", got, c.refused)
					}
					// Burst means at once, and the pace is the API's.
					for i, s := range slots {
						want := p.made(i)
						if i >= p.atOnce {
							want = p.paced + time.Duration(i-p.atOnce)*500*ms + c.guard
						}
						if s != want {
							t.Fatalf("call %d's slot at %v; want %v", i+1, s, want)
						}
					}
				})
			}
		}
	})
}

// TestGuardSteps: when the guard starts and ends, step by step, at 10/s
// with a burst of 3 (an interval of 100 ms) and a guard of 50 ms, and its
// parts: none unless asked for, at most half the bucket, none for a burst
// of 1, one for each bucket of Also, left by a cancel.
func TestGuardSteps(t *testing.T) {
	sec := time.Second
	tables := []struct {
		name string
		lim  Limit
		rows []step
	}{
		{
			name: "from the call that fills the bucket until it has been empty for the guard",
			lim:  Limit{Rate: 10, Burst: 3, MaxWait: sec, Guard: 50 * ms},
			rows: []step{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 0},
				{0, "peek", 1, true, 0}, // the third fits at once, and fills the bucket
				{0, "reserve", 1, true, 0},
				{0, "peek", 1, true, 150 * ms}, // now guarded
				{0, "reserve", 1, true, 150 * ms},
				{0, "reserve", 1, true, 250 * ms},
				{0, "allow", 1, false, 350 * ms},
				// The bucket is empty at 500ms; at 520ms it still keeps
				// the guard, so the third of a new burst starts 50ms on.
				{520 * ms, "reserve", 1, true, 0},
				{520 * ms, "reserve", 1, true, 0},
				{520 * ms, "reserve", 1, true, 50 * ms},
				// Empty at 820ms, guard over at 870ms: 3 at once again.
				{2 * sec, "reserve", 1, true, 0},
				{2 * sec, "reserve", 1, true, 0},
				{2 * sec, "reserve", 1, true, 0},
				{2 * sec, "reserve", 1, true, 150 * ms},
			},
		},
		{
			name: "a cost that fills the bucket at once",
			lim:  Limit{Rate: 10, Burst: 3, MaxWait: sec, Guard: 50 * ms},
			rows: []step{
				{0, "reserve", 3, true, 0},
				{0, "reserve", 1, true, 150 * ms},
				{0, "reserve", 2, true, 350 * ms},
			},
		},
		{
			name: "cancelling the call that started the guard leaves it",
			lim:  Limit{Rate: 10, Burst: 3, MaxWait: sec, Guard: 50 * ms},
			rows: []step{
				{0, "reserve", 2, true, 0},
				{0, "reserve", 1, true, 0},
				{0, "cancel", 0, true, 0},
				{0, "reserve", 1, true, 50 * ms},
			},
		},
		{
			name: "none unless asked for: the burst, then the pace",
			lim:  Limit{Rate: 10, Burst: 3, MaxWait: sec},
			rows: []step{
				{0, "reserve", 3, true, 0},
				{0, "reserve", 1, true, 100 * ms},
				{0, "reserve", 1, true, 200 * ms},
			},
		},
		{
			name: "none with a burst of 1",
			lim:  Limit{Rate: 10, MaxWait: sec},
			rows: []step{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 100 * ms},
				{0, "reserve", 1, true, 200 * ms},
			},
		},
		{
			name: "a guard shorter than the cap",
			lim:  Limit{Rate: 10, Burst: 3, MaxWait: sec, Guard: 20 * ms},
			rows: []step{
				{0, "reserve", 3, true, 0},
				{0, "reserve", 1, true, 120 * ms},
				{0, "reserve", 1, true, 220 * ms},
			},
		},
		{
			// 1,000/s with a burst of 80: a guard of 250ms is capped at
			// half the bucket, 40ms.
			name: "the guard is at most half the bucket",
			lim:  Limit{Rate: 1000, Burst: 80, MaxWait: sec, Guard: 250 * ms},
			rows: []step{
				{0, "reserve", 80, true, 0},
				{0, "reserve", 1, true, 41 * ms},
				{0, "reserve", 1, true, 42 * ms},
			},
		},
		{
			// 10/s with a burst of 3 (guard 150ms), and 2/s with a burst
			// of 2 (interval 500ms, guard 250ms): the second call fills
			// the slower bucket, which from then on holds the calls
			// 500ms apart, 250ms late.
			name: "each bucket of Also has its own",
			lim:  Limit{Rate: 10, Burst: 3, MaxWait: 5 * sec, Guard: 250 * ms, Also: []Rate{{Rate: 2, Burst: 2}}},
			rows: []step{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 750 * ms},
				{0, "reserve", 1, true, 1250 * ms},
			},
		},
	}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, tc := range tables {
			t.Run(tc.name, func(t *testing.T) { runSteps(t, client, tc.lim, tc.rows) })
		}
	})
}

// TestGuardInTheFallback: the in-process fallback (Options.Fallback, at
// a share of 1) gives the same slots as the reserve script through the
// burst, the guard and its end.
func TestGuardInTheFallback(t *testing.T) {
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close() // nothing listens there any more
	// A pool larger than the failed dials, so that go-redis starts no
	// background redial that would outlive the test.
	down := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * ms, DialerRetries: 1, PoolSize: 1000})
	defer down.Close()
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		onRedis := newThrottle(t, client, clock.Now, nil)
		local := newThrottle(t, down, nil, &Options{Fallback: 1})
		local.hostNow = clock.Now
		ctx := context.Background()
		slow := []time.Duration{0, 0, 0, 0, 0, 0, 0, 520 * ms, 520 * ms, 520 * ms, 520 * ms, 3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}
		fast := make([]time.Duration, 24) // at 1,000/s, a burst of 16: the guard is half the bucket, 8ms
		for _, c := range []struct {
			key string
			lim Limit
			at  []time.Duration
		}{
			{"slow", Limit{Rate: 10, Burst: 3, MaxWait: 2 * time.Second, Guard: 250 * ms}, slow},
			{"fast", Limit{Rate: 1000, Burst: 16, MaxWait: 2 * time.Second, Guard: 250 * ms}, fast},
			{"none", Limit{Rate: 10, Burst: 3, MaxWait: 2 * time.Second}, slow},
		} {
			for i, at := range c.at {
				clock.Set(at)
				want, err := onRedis.Reserve(ctx, c.key, c.lim, 1)
				if err != nil {
					t.Fatal(err)
				}
				got, err := local.Reserve(ctx, c.key, c.lim, 1)
				if err != nil || !got.Local {
					t.Fatalf("%s call %d: %+v, %v; want a local slot", c.key, i+1, got, err)
				}
				if got.OK != want.OK || got.Delay != want.Delay || got.RetryAfter != want.RetryAfter {
					t.Fatalf("%s call %d at %v: the fallback gives %v, the script %v", c.key, i+1, at, got, want)
				}
			}
		}
	})
}
