package throttle

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/redistest"
)

// step is one row of a step table with several limits: at a time on the
// injected clock, an operation and what it gives.
type step struct {
	at    time.Duration
	op    string // "reserve", "peek", "allow", "cancel" (the last reservation), "pause <d>", "backoff <d>"
	n     int64
	ok    bool          // a slot (reserve, peek, allow), given back (cancel)
	delay time.Duration // Delay when ok, RetryAfter when not; the pause left for "pause"
}

// runSteps runs rows on a fresh Throttle with an injected clock.
func runSteps(t *testing.T, client redis.UniversalClient, lim Limit, rows []step) {
	t.Helper()
	clock := &fakeClock{t: base}
	th := newThrottle(t, client, clock.Now, nil)
	ctx := context.Background()
	var last Reservation
	for i, r := range rows {
		clock.Set(r.at)
		var (
			res Reservation
			err error
		)
		switch {
		case r.op == "reserve":
			res, err = th.Reserve(ctx, "api", lim, r.n)
			last = res
		case r.op == "peek":
			res, err = th.Peek(ctx, "api", lim, r.n)
		case r.op == "allow":
			res, err = th.Allow(ctx, "api", lim, r.n)
		case r.op == "cancel":
			res.OK, err = th.Cancel(ctx, last)
		case strings.HasPrefix(r.op, "pause "), strings.HasPrefix(r.op, "backoff "):
			verb, arg, _ := strings.Cut(r.op, " ")
			d, perr := time.ParseDuration(arg)
			if perr != nil {
				t.Fatal(perr)
			}
			res.OK = true
			if verb == "pause" {
				res.Delay, err = th.Pause(ctx, "api", lim, d)
			} else {
				res.Delay, err = th.Backoff(ctx, "api", lim, d)
			}
		default:
			t.Fatalf("row %d: unknown op %q", i, r.op)
		}
		if err != nil {
			t.Fatalf("row %d (%s at %v): %v", i, r.op, r.at, err)
		}
		got := res.Delay
		if !res.OK {
			got = res.RetryAfter
		}
		if res.OK != r.ok || got != r.delay {
			t.Fatalf("row %d (%s %d at %v): got ok=%v %v, want ok=%v %v", i, r.op, r.n, r.at, res.OK, got, r.ok, r.delay)
		}
	}
}

// TestSeveralLimitsSteps: a call waits for the latest of the slots its
// buckets give it, and books every bucket.
func TestSeveralLimitsSteps(t *testing.T) {
	// The rows are the buckets' own arithmetic, without the guard
	// (Limit.Guard, set to none below; TestGuardSteps has it).
	sec := time.Second
	tables := []struct {
		name string
		lim  Limit
		rows []step
	}{
		{
			// 10/s, and 20 per 10 s of which 5 at once: five calls go at
			// the pace of 10/s, then the slower limit holds them 500 ms
			// apart; after an idle 10 s both are full again.
			name: "10/s plus 20 per 10s",
			lim:  Limit{Guard: -1, Rate: 10, MaxWait: 2 * sec, Also: []Rate{{Rate: 20, Per: 10 * sec, Burst: 5}}},
			rows: []step{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 100 * ms},
				{0, "reserve", 1, true, 200 * ms},
				{0, "reserve", 1, true, 300 * ms},
				{0, "reserve", 1, true, 400 * ms},
				{0, "reserve", 1, true, 500 * ms},
				{0, "allow", 1, false, 1000 * ms},
				{0, "peek", 1, true, 1000 * ms},
				{0, "reserve", 1, true, 1000 * ms},
				{0, "reserve", 1, true, 1500 * ms},
				{0, "reserve", 1, true, 2000 * ms},
				{0, "reserve", 1, false, 500 * ms}, // the slot at 2.5s is beyond the 2s wait
				{1 * sec, "reserve", 1, true, 1500 * ms},
				{12 * sec, "reserve", 1, true, 0},
				{12 * sec, "reserve", 1, true, 100 * ms},
			},
		},
		{
			// Calls of cost 2 against 10 units/s, and 2 calls/s whatever
			// their cost: the calls limit holds them 500 ms apart.
			name: "a second rate counting calls",
			lim:  Limit{Guard: -1, Rate: 10, Burst: 10, MaxWait: 5 * sec, Also: []Rate{{Rate: 2, Counts: CountsCalls}}},
			rows: []step{
				{0, "reserve", 2, true, 0},
				{0, "reserve", 2, true, 500 * ms},
				{0, "reserve", 2, true, 1000 * ms},
				{0, "reserve", 10, true, 1500 * ms}, // a call of the whole burst takes one call's slot
				{0, "reserve", 2, true, 2000 * ms},
				// The units bucket is booked from the slot the calls
				// limit held each call to: the whole burst at 1.5s
				// leaves it full until 2.5s, the call at 2s until
				// 2.7s, so another whole burst waits until then.
				{0, "reserve", 10, true, 2700 * ms},
			},
		},
		{
			// The same calls, the second rate counting their cost: each
			// takes a whole second of 2 units/s.
			name: "a second rate counting cost",
			lim:  Limit{Guard: -1, Rate: 10, Burst: 10, MaxWait: 5 * sec, Also: []Rate{{Rate: 2, Burst: 2}}},
			rows: []step{
				{0, "reserve", 2, true, 0},
				{0, "reserve", 2, true, 1000 * ms},
				{0, "reserve", 2, true, 2000 * ms},
				{0, "reserve", 1, true, 2500 * ms},
			},
		},
		{
			// 10/s and 2/s with a burst of 3: cancelling the last slot
			// gives it back in both buckets; a pause moves both, each by
			// its own burst, and calls resume paced by both.
			name: "pause and cancel",
			lim:  Limit{Guard: -1, Rate: 10, MaxWait: 10 * sec, Also: []Rate{{Rate: 2, Burst: 3}}},
			rows: []step{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 100 * ms},
				{0, "reserve", 1, true, 200 * ms},
				{0, "reserve", 1, true, 500 * ms},
				{0, "cancel", 0, true, 0},
				{0, "reserve", 1, true, 500 * ms},
				{0, "pause 3s", 0, true, 3 * sec},
				{0, "reserve", 1, true, 3000 * ms},
				{0, "reserve", 1, true, 3500 * ms},
				{0, "cancel", 0, true, 0},
				{0, "reserve", 1, true, 3500 * ms},
				{0, "reserve", 1, true, 4000 * ms},
			},
		},
		{
			// A refusal steps the share down to 95%, for every bucket:
			// 100 ms later it has climbed back to 95.2%, and the 10/s
			// rate spaces the slots by 100ms / 0.952, rounded up to a µs
			// (105,043 µs) instead of 100 ms.
			name: "backoff paces every bucket",
			lim:  Limit{Guard: -1, Rate: 100, Also: []Rate{{Rate: 10}}},
			rows: []step{
				{0, "backoff 100ms", 0, true, 100 * ms},
				{100 * ms, "reserve", 1, true, 0},
				{100 * ms, "reserve", 1, true, 105043 * time.Microsecond},
			},
		},
		{
			// As TestCancelNeverReopensAPause, where the pause moves the
			// second bucket and not the first: cancelling the slot booked
			// before the pause gives it back only down to the pause's end
			// in the first bucket, and leaves the second where the pause
			// put it. No slot falls inside the pause.
			name: "cancel never reopens a pause",
			lim:  Limit{Guard: -1, Rate: 1, MaxWait: 10 * sec, Also: []Rate{{Rate: 4, Per: 2 * sec, Burst: 2}}},
			rows: []step{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 1000 * ms},
				{0, "pause 1.5s", 0, true, 1500 * ms},
				{0, "cancel", 0, true, 0},
				{0, "reserve", 1, true, 1500 * ms},
				{0, "reserve", 1, true, 2500 * ms},
				{0, "cancel", 0, true, 0},
				{0, "reserve", 1, true, 2500 * ms},
			},
		},
	}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, tc := range tables {
			t.Run(tc.name, func(t *testing.T) { runSteps(t, client, tc.lim, tc.rows) })
		}
	})
}

// TestSeveralLimitsCancelAfterAnother: a reservation followed by another
// is not given back, in any bucket.
func TestSeveralLimitsCancelAfterAnother(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		runSteps(t, client, Limit{Rate: 10, Also: []Rate{{Rate: 2}}}, []step{
			{0, "reserve", 1, true, 0},
			{0, "reserve", 1, true, 500 * ms},
			{0, "peek", 1, true, 1000 * ms},
			{0, "cancel", 0, true, 0},
			{0, "peek", 1, true, 500 * ms},
			{0, "reserve", 1, true, 500 * ms},
			{0, "reserve", 1, true, 1000 * ms},
		})
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 10, Also: []Rate{{Rate: 2}}}
		a, _ := th.Reserve(ctx, "k", lim, 1)
		if _, err := th.Reserve(ctx, "k", lim, 1); err != nil {
			t.Fatal(err)
		}
		if ok, err := th.Cancel(ctx, a); err != nil || ok {
			t.Fatalf("cancel of a reservation with a later one: %v, %v; want refused", ok, err)
		}
		if r, _ := th.Peek(ctx, "k", lim, 1); r.Delay != time.Second {
			t.Fatalf("next slot after a refused cancel: %v; want 1s", r.Delay)
		}
	})
}

// TestSeveralLimitsFields: every bucket lives in the key's one hash
// (so one script books them all on a cluster too): a key without Also
// holds one bucket's fields and the TTL's mark.
func TestSeveralLimitsFields(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		for _, c := range []struct {
			key  string
			lim  Limit
			want []string
		}{
			{"one", Limit{Rate: 10}, []string{"a", "e", "f"}},
			{"three", Limit{Rate: 10, Also: []Rate{{Rate: 100, Per: time.Minute}, {Rate: 1000, Per: time.Hour}}}, []string{"a", "a1", "a2", "e", "f", "f1", "f2"}},
		} {
			if _, err := th.Reserve(ctx, c.key, c.lim, 1); err != nil {
				t.Fatal(err)
			}
			k, _ := th.rateKey(c.key)
			got, err := client.HKeys(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("%s: fields %v; want %v", c.key, got, c.want)
			}
		}
	})
}

// TestSeveralLimitsBadRatesAndCosts: each rate is validated as the main
// one; a cost that a cost-counting bucket can never hold is refused with
// the same error as for the main rate, naming the rate. Nothing is
// written.
func TestSeveralLimitsBadRatesAndCosts(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	th := newThrottle(t, client, nil, nil)
	ctx := context.Background()
	five := make([]Rate, MaxAlso+1)
	for i := range five {
		five[i] = Rate{Rate: 1}
	}
	for _, lim := range []Limit{
		{Rate: 10, Also: []Rate{{Rate: 0}}},
		{Rate: 10, Also: []Rate{{Rate: 1}, {Rate: -1}}},
		{Rate: 10, Also: []Rate{{Rate: 1, Per: -time.Second}}},
		{Rate: 10, Also: []Rate{{Rate: 1, Burst: -1}}},
		{Rate: 10, Also: []Rate{{Rate: 1, Counts: 7}}},
		{Rate: 10, Also: five},
	} {
		_, err := th.Reserve(ctx, "k", lim, 1)
		if !errors.Is(err, algorithms.ErrInvalidPolicy) {
			t.Errorf("Reserve(%+v): %v; want an invalid policy", lim, err)
		}
	}
	lim := Limit{Rate: 10, Burst: 5, Also: []Rate{{Rate: 100, Per: time.Minute, Burst: 3}, {Rate: 1, Counts: CountsCalls}}}
	if _, err := th.Reserve(ctx, "k", lim, 4); !errors.Is(err, algorithms.ErrCostExceedsCapacity) ||
		!strings.Contains(err.Error(), "Also[0] (100 per 1m0s, burst 3)") {
		t.Errorf("cost 4 with a burst of 3 in Also[0]: %v; want ErrCostExceedsCapacity naming the rate", err)
	}
	if _, err := th.Reserve(ctx, "k", lim, 6); !errors.Is(err, algorithms.ErrCostExceedsCapacity) {
		t.Errorf("cost 6 with burst 5: %v", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("bad calls wrote keys: %v", keys)
	}
	// A bucket counting calls takes 1 whatever the cost.
	if r, err := th.Reserve(ctx, "k", Limit{Rate: 10, Burst: 5, Also: []Rate{{Rate: 1, Counts: CountsCalls}}}, 5); err != nil || !r.OK {
		t.Errorf("cost 5 against a calls bucket of burst 1: %v, %v; want a slot", r, err)
	}
}

// TestSeveralLimitsPauseVoidsOnlySlotsInsideIt: as
// TestPauseVoidsOnlySlotsInsideItOnTheInjectedClock, where the second
// rate spaces the slots and the main one has a burst: whether a slot
// comes before a pause's end is read from the slot itself, not from the
// main bucket, whose place is up to Burst-1 intervals earlier.
func TestSeveralLimitsPauseVoidsOnlySlotsInsideIt(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 100, Burst: 5, MaxWait: 5 * time.Second, Also: []Rate{{Rate: 10}}}
		var rs []Reservation
		for i := range 5 { // slots at 0, 100ms, 200ms, 300ms, 400ms
			r, err := th.Reserve(ctx, "api", lim, 1)
			if err != nil || !r.OK || r.Delay != time.Duration(i)*100*ms {
				t.Fatalf("reserve %d: %v, %v", i, r, err)
			}
			rs = append(rs, r)
		}
		// The pause runs from 200ms to 380ms on the injected clock: the
		// slot at 400ms is after it (the main bucket alone would place
		// it at 360ms).
		clock.Set(200 * ms)
		if _, err := th.Pause(ctx, "api", lim, 180*ms); err != nil {
			t.Fatal(err)
		}
		checkVoids(t, th, rs, []bool{true, true, true, true, false})
	})
}

// booking is one slot booked in the fleet test, with its cost.
type booking struct {
	at time.Time
	n  int64
}

// mostIn returns the most units in any half-open window of the given
// width, a call counting unit(n).
func mostIn(bs []booking, width time.Duration, unit func(int64) int64) int64 {
	slices.SortFunc(bs, func(a, b booking) int { return a.at.Compare(b.at) })
	var most, sum int64
	j := 0
	for i := range bs {
		sum += unit(bs[i].n)
		for !bs[j].at.After(bs[i].at.Add(-width)) {
			sum -= unit(bs[j].n)
			j++
		}
		most = max(most, sum)
	}
	return most
}

// TestFleetScheduleKeepsEveryLimit: as TestFleetScheduleNeverExceedsQuota,
// with three limits on the key and calls of random cost: the booked slots
// never hold more than any limit allows in any window of its period
// (Rate + Burst - 1 units, a GCRA bucket's bound), whatever the number of
// goroutines booking at once.
func TestFleetScheduleKeepsEveryLimit(t *testing.T) {
	lim := Limit{Rate: 300, Burst: 4, MaxWait: 300 * ms, Also: []Rate{
		{Rate: 100, Counts: CountsCalls},              // calls: at least 10ms apart
		{Rate: 1000, Per: 5 * time.Second, Burst: 40}, // units: 200/s on average
	}}
	calls := func(int64) int64 { return 1 }
	cost := func(n int64) int64 { return n }
	forEachRealTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, goroutines := range []int{8, 32} {
			clock := &fakeClock{t: base}
			prefix := redistest.KeyPrefix(t) + "th"
			var fleet []*Throttle
			for i := 0; i < 3; i++ {
				fleet = append(fleet, newThrottle(t, client, clock.Now, &Options{Prefix: prefix}))
			}
			rng := rand.New(rand.NewPCG(7, uint64(goroutines)))
			var (
				mu  sync.Mutex
				got []booking
			)
			ctx := context.Background()
			var at time.Duration
			for batch := 0; batch < 120; batch++ {
				at += time.Duration(rng.Int64N(int64(100 * ms)))
				clock.Set(at)
				now := clock.Now().Truncate(time.Microsecond)
				var wg sync.WaitGroup
				for g := 0; g < goroutines; g++ {
					th, n := fleet[g%len(fleet)], 1+rng.Int64N(4)
					wg.Add(1)
					go func() {
						defer wg.Done()
						r, err := th.Reserve(ctx, "api", lim, n)
						if err != nil {
							t.Error(err)
							return
						}
						if r.OK {
							mu.Lock()
							got = append(got, booking{now.Add(r.Delay), n})
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
			}
			if len(got) < 300 {
				t.Fatalf("%d goroutines: only %d slots booked", goroutines, len(got))
			}
			for _, c := range []struct {
				what  string
				width time.Duration
				unit  func(int64) int64
				most  int64
			}{
				{"units in 1s (300/s, burst 4)", time.Second, cost, 300 + 4 - 1},
				{"calls in 1s (100/s)", time.Second, calls, 100},
				{"calls in 10ms (100/s)", 10 * ms, calls, 1},
				{"units in 5s (1000 per 5s, burst 40)", 5 * time.Second, cost, 1000 + 40 - 1},
			} {
				if n := mostIn(got, c.width, c.unit); n > c.most {
					t.Errorf("%d goroutines: %d %s; at most %d", goroutines, n, c.what, c.most)
				}
			}
			// The limits bind: the 5 s rate, the tightest on average,
			// is used close to fully once its burst is spent.
			if n := mostIn(got, 5*time.Second, cost); n < 900 {
				t.Errorf("%d goroutines: at most %d units in 5s; the fleet should use most of 1000", goroutines, n)
			}
		}
	})
}
