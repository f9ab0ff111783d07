package throttle

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
)

// settleStep is one row of a settle table: at a time on the injected
// clock, "reserve" or "peek" n units (want: ok and Delay or RetryAfter),
// "settle <actual>" the last reservation, or "pause <d>".
type settleStep struct {
	at    time.Duration
	op    string
	n     int64
	ok    bool
	delay time.Duration
}

func runSettle(t *testing.T, th *Throttle, clock *fakeClock, lim Limit, rows []settleStep) {
	t.Helper()
	ctx := context.Background()
	var last Reservation
	for i, r := range rows {
		clock.Set(r.at)
		var (
			res Reservation
			err error
		)
		verb, arg, _ := strings.Cut(r.op, " ")
		switch verb {
		case "reserve":
			res, err = th.Reserve(ctx, "api", lim, r.n)
			last = res
		case "peek":
			res, err = th.Peek(ctx, "api", lim, r.n)
		case "settle":
			actual, perr := strconv.ParseInt(arg, 10, 64)
			if perr != nil {
				t.Fatal(perr)
			}
			if err := th.Settle(ctx, last, actual); err != nil {
				t.Fatalf("row %d (%s at %v): %v", i, r.op, r.at, err)
			}
			continue
		case "pause":
			d, perr := time.ParseDuration(arg)
			if perr != nil {
				t.Fatal(perr)
			}
			res.OK = true
			res.Delay, err = th.Pause(ctx, "api", lim, d)
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

// TestSettleSteps: a settle moves the TAT by (actual - estimate)
// intervals: a refund brings the next slots forward, a debt pushes them
// back; a refund never goes below now, nor back into a pause. At 10/s
// with a burst of 10, a peek of 10 units waits exactly TAT - now.
func TestSettleSteps(t *testing.T) {
	lim := Limit{Rate: 10, Burst: 10, Guard: -1, MaxWait: time.Minute}
	tables := []struct {
		name string
		rows []settleStep
	}{
		{"refund", []settleStep{
			{0, "reserve", 5, true, 0},
			{0, "peek", 10, true, 500 * ms},
			{0, "settle 2", 0, false, 0},
			{0, "peek", 10, true, 200 * ms},
			{100 * ms, "peek", 10, true, 100 * ms},
		}},
		{"refund after later bookings", []settleStep{
			{0, "reserve", 10, true, 0},
			{0, "reserve", 10, true, time.Second}, // settles after another: still applies
			{0, "settle 4", 0, false, 0},
			{0, "peek", 10, true, 1400 * ms},
		}},
		{"a refund makes no more burst than the bucket holds", []settleStep{
			{0, "reserve", 10, true, 0},
			{900 * ms, "settle 0", 0, false, 0}, // TAT 1s - 1s would be 0, behind now
			{900 * ms, "peek", 10, true, 0},
			{900 * ms, "reserve", 10, true, 0},
			{900 * ms, "reserve", 1, true, 100 * ms},
		}},
		{"debt", []settleStep{
			{0, "reserve", 2, true, 0},
			{0, "settle 25", 0, false, 0}, // TAT 2.5s: 15 units over the burst
			{0, "peek", 1, true, 1600 * ms},
			{0, "reserve", 1, true, 1600 * ms},
			{1 * time.Second, "peek", 1, true, 700 * ms},
		}},
		{"a refund does not reopen a pause", []settleStep{
			{0, "reserve", 5, true, 0},
			{0, "pause 2s", 0, true, 2 * time.Second},
			{0, "peek", 1, true, 2 * time.Second},
			{0, "settle 0", 0, false, 0},
			{0, "peek", 1, true, 2 * time.Second},
		}},
	}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, tc := range tables {
			t.Run(tc.name, func(t *testing.T) {
				clock := &fakeClock{t: base}
				runSettle(t, newThrottle(t, client, clock.Now, nil), clock, lim, tc.rows)
			})
		}
	})
}

// TestSettleSeveralLimits: a settle moves every bucket that counts cost
// (the Limit's own and a tokens-a-minute Also) and leaves the one that
// counts calls as the reservation left it.
func TestSettleSeveralLimits(t *testing.T) {
	lim := Limit{Rate: 100, Burst: 100, Guard: -1, MaxWait: time.Minute, Also: []Rate{
		{Rate: 2, Burst: 2, Counts: CountsCalls}, // T 500ms
		{Rate: 600, Per: time.Minute, Burst: 20}, // T 100ms
	}}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		k, _ := th.rateKey("api")
		fields := func() []any {
			v, err := client.HMGet(ctx, k, "a", "a1", "a2").Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		r, err := th.Reserve(ctx, "api", lim, 10)
		if err != nil || !r.OK || r.Delay != 0 {
			t.Fatalf("reserve: %+v, %v", r, err)
		}
		before := fields()
		if err := th.Settle(ctx, r, 60); err != nil {
			t.Fatal(err)
		}
		after := fields()
		us := base.UnixMicro()
		want := []any{strconv.FormatInt(us+600_000, 10), before[1], strconv.FormatInt(us+6_000_000, 10)}
		for i := range want {
			if after[i] != want[i] {
				t.Errorf("bucket %d after settling 10 to 60: TAT %v, want %v (before %v)", i, after[i], want[i], before[i])
			}
		}
		if before[1] != strconv.FormatInt(us+500_000, 10) {
			t.Errorf("calls bucket TAT %v, want one call's interval", before[1])
		}
		// The tokens a minute now hold the next call back: 6s + 100ms - 2s.
		if p, _ := th.Peek(ctx, "api", lim, 1); p.Delay != 4100*ms {
			t.Errorf("next slot after the debt in %v; want 4.1s", p.Delay)
		}
	})
}

// TestSettleNothingToDo: an actual cost below zero is refused; the
// estimate itself, a peek and a reservation that was not granted settle
// to nothing.
func TestSettleNothingToDo(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 10, Burst: 10, Guard: -1, MaxWait: -1}
		r, _ := th.Reserve(ctx, "api", lim, 5)
		if err := th.Settle(ctx, r, -1); !errors.Is(err, algorithms.ErrInvalidCost) {
			t.Fatalf("settle to -1: %v; want ErrInvalidCost", err)
		}
		p, _ := th.Peek(ctx, "api", lim, 5)
		no, _ := th.Reserve(ctx, "api", lim, 10)
		if no.OK {
			t.Fatal("a reservation beyond the burst with no wait was granted")
		}
		for _, x := range []Reservation{r, p, no} {
			if err := th.Settle(ctx, x, x.Cost()); err != nil {
				t.Fatal(err)
			}
		}
		if err := th.Settle(ctx, p, 0); err != nil {
			t.Fatal(err)
		}
		if err := th.Settle(ctx, no, 0); err != nil {
			t.Fatal(err)
		}
		if q, _ := th.Peek(ctx, "api", Limit{Rate: 10, Burst: 10, Guard: -1}, 10); q.Delay != 500*ms {
			t.Fatalf("TAT %v ahead after settles that do nothing; want 500ms", q.Delay)
		}
	})
}

// TestSettleLocalFallback: a slot booked by the in-process fallback
// settles on the local bucket.
func TestSettleLocalFallback(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * ms, DialerRetries: 1})
	defer client.Close()
	clock := &fakeClock{t: base}
	th := newThrottle(t, client, nil, &Options{Fallback: 1})
	th.hostNow = clock.Now
	ctx := context.Background()
	lim := Limit{Rate: 10, Burst: 10, Guard: -1}
	r, err := th.Reserve(ctx, "api", lim, 5)
	if err != nil || !r.Local {
		t.Fatalf("local reserve: %+v, %v", r, err)
	}
	if err := th.Settle(ctx, r, 1); err != nil {
		t.Fatal(err)
	}
	if p, _ := th.Peek(ctx, "api", lim, 10); p.Delay != 100*ms {
		t.Fatalf("local TAT %v ahead after settling 5 to 1; want 100ms", p.Delay)
	}
	if err := th.Settle(ctx, r, 30); err != nil {
		t.Fatal(err)
	}
	if p, _ := th.Peek(ctx, "api", lim, 10); p.Delay != 2600*ms {
		t.Fatalf("local TAT %v ahead after a debt of 25; want 2.6s", p.Delay)
	}
}
