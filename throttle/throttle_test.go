package throttle

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var base = time.UnixMicro(1_700_000_000_000_000)

const ms = time.Millisecond

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(d time.Duration) {
	c.mu.Lock()
	c.t = base.Add(d)
	c.mu.Unlock()
}

func forEachTarget(t *testing.T, f func(t *testing.T, client redis.UniversalClient)) {
	for _, tg := range redistest.Targets() {
		t.Run(tg.Name, func(t *testing.T) { f(t, tg.Client(t)) })
	}
}

// newThrottle returns a Throttle with its own key prefix; with a clock it
// decides on the clock instead of the server's TIME.
func newThrottle(t *testing.T, client redis.UniversalClient, clock func() time.Time, opts *Options) *Throttle {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	if o.Prefix == "" {
		o.Prefix = redistest.KeyPrefix(t) + "th"
	}
	if clock != nil {
		o.clock = clock
	}
	th, err := New(client, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { th.Close() })
	return th
}

type resRow struct {
	at    time.Duration
	op    string // "reserve", "peek", "allow", "pause <d>"
	n     int64
	ok    bool
	delay time.Duration // Delay when ok, RetryAfter when not
}

// TestReservationSteps: the GCRA's own arithmetic, the bursty tables
// without the guard (TestGuardSteps has it).
func TestReservationSteps(t *testing.T) {
	tables := []struct {
		name string
		lim  Limit
		rows []resRow
	}{
		{
			name: "evenly spaced at 10/s",
			lim:  Limit{Rate: 10, MaxWait: 250 * ms},
			rows: []resRow{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 100 * ms},
				{0, "peek", 1, true, 200 * ms},
				{0, "reserve", 1, true, 200 * ms},
				{0, "reserve", 1, false, 50 * ms}, // slot at 300ms is beyond 250ms
				{0, "allow", 1, false, 300 * ms},
				{50 * ms, "reserve", 1, true, 250 * ms},
				{time.Second, "allow", 1, true, 0},
			},
		},
		{
			name: "burst of 3 then paced",
			lim:  Limit{Rate: 10, Burst: 3, Guard: -1},
			rows: []resRow{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 2, true, 0},
				{0, "reserve", 1, true, 100 * ms},
				{0, "reserve", 3, true, 400 * ms},
			},
		},
		{
			name: "variable cost",
			lim:  Limit{Rate: 100, Burst: 1},
			rows: []resRow{
				{0, "reserve", 1, true, 0},
				{0, "reserve", 1, true, 10 * ms},
			},
		},
		{
			name: "pause then resume paced, no herd",
			lim:  Limit{Rate: 10, Burst: 3, MaxWait: 5 * time.Second, Guard: -1},
			rows: []resRow{
				{0, "reserve", 1, true, 0},
				{0, "pause 2s", 0, true, 2 * time.Second},
				{0, "reserve", 1, true, 2 * time.Second},
				{0, "reserve", 1, true, 2100 * ms},
				{0, "reserve", 1, true, 2200 * ms},
				// A shorter pause does not shorten the longer one.
				{100 * ms, "pause 1s", 0, true, 1900 * ms},
				{3 * time.Second, "reserve", 1, true, 0},
			},
		},
	}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		for _, tc := range tables {
			t.Run(tc.name, func(t *testing.T) {
				clock := &fakeClock{t: base}
				th := newThrottle(t, client, clock.Now, nil)
				ctx := context.Background()
				for i, r := range tc.rows {
					clock.Set(r.at)
					var res Reservation
					var err error
					switch r.op {
					case "reserve":
						res, err = th.Reserve(ctx, "api", tc.lim, r.n)
					case "peek":
						res, err = th.Peek(ctx, "api", tc.lim, r.n)
					case "allow":
						res, err = th.Allow(ctx, "api", tc.lim, r.n)
					default:
						d, _ := time.ParseDuration(r.op[len("pause "):])
						var left time.Duration
						left, err = th.Pause(ctx, "api", tc.lim, d)
						res = Reservation{OK: true, Delay: left}
					}
					if err != nil {
						t.Fatalf("row %d: %v", i, err)
					}
					got := res.Delay
					if !res.OK {
						got = res.RetryAfter
					}
					if res.OK != r.ok || got != r.delay {
						t.Fatalf("row %d (%s at %v): got ok=%v %v, want ok=%v %v (%s)", i, r.op, r.at, res.OK, got, r.ok, r.delay, res)
					}
				}
			})
		}
	})
}

func TestBadLimitsAndCosts(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	th := newThrottle(t, client, nil, nil)
	ctx := context.Background()
	for _, c := range []struct {
		lim Limit
		n   int64
	}{
		{Limit{Rate: 0}, 1},
		{Limit{Rate: -5}, 1},
		{Limit{Rate: 10, Per: -time.Second}, 1},
		{Limit{Rate: 10, Burst: -1}, 1},
		{Limit{Rate: 10, Burst: 2}, 3}, // more than the bucket holds
		{Limit{Rate: 10}, 0},
	} {
		if _, err := th.Reserve(ctx, "k", c.lim, c.n); err == nil {
			t.Errorf("Reserve(%+v, %d) succeeded", c.lim, c.n)
		}
	}
	if _, err := th.Reserve(ctx, "", Limit{Rate: 1}, 1); err == nil {
		t.Error("empty key accepted")
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("bad calls wrote keys: %v", keys)
	}
}

func TestCancelGivesBackTheLastSlot(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 10}
		if _, err := th.Reserve(ctx, "k", lim, 1); err != nil {
			t.Fatal(err)
		}
		a, _ := th.Reserve(ctx, "k", lim, 1)
		if ok, err := th.Cancel(ctx, a); err != nil || !ok {
			t.Fatalf("cancel of the last reservation: %v, %v", ok, err)
		}
		b, _ := th.Reserve(ctx, "k", lim, 1)
		if b.Delay != a.Delay {
			t.Fatalf("after cancel the slot at %v should be free again, got %v", a.Delay, b.Delay)
		}
		c, _ := th.Reserve(ctx, "k", lim, 1)
		// b is followed by c: cancelling b would move c's slot; refused.
		if ok, err := th.Cancel(ctx, b); err != nil || ok {
			t.Fatalf("cancel of a reservation with a later one: %v, %v; want refused", ok, err)
		}
		if ok, _ := th.Cancel(ctx, c); !ok {
			t.Fatal("cancel of the last reservation refused")
		}
	})
}

// TestCancelNeverReopensAPause: a pause that starts before the last
// booked slot leaves the TAT where it was; cancelling that slot then gives
// it back, but only down to the pause's end: the slot booked next is not
// inside the pause (it was, before the fix: a call during a 429 pause).
func TestCancelNeverReopensAPause(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 1}
		lim.MaxWait = 10 * time.Second
		steps := []struct {
			do        string
			wantDelay time.Duration
		}{
			{"reserve", 0},
			{"reserve", time.Second},
			{"pause 1.5s", 0},
			{"cancel", 0},
			{"reserve", 1500 * ms},
			{"reserve", 2500 * ms},
		}
		var last Reservation
		for i, st := range steps {
			switch st.do {
			case "reserve":
				r, err := th.Reserve(ctx, "k", lim, 1)
				if err != nil || !r.OK {
					t.Fatalf("step %d: reserve: %+v, %v", i, r, err)
				}
				if r.Delay != st.wantDelay {
					t.Fatalf("step %d: slot in %v; want %v", i, r.Delay, st.wantDelay)
				}
				last = r
			case "pause 1.5s":
				if _, err := th.Pause(ctx, "k", lim, 1500*ms); err != nil {
					t.Fatal(err)
				}
			case "cancel":
				if ok, err := th.Cancel(ctx, last); err != nil || !ok {
					t.Fatalf("step %d: cancel of the last slot: %v, %v", i, ok, err)
				}
			}
		}
	})
}

func TestConcurrencyLeases(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		c := Concurrency{Max: 2, Lease: time.Second}
		a, err := th.Acquire(ctx, "api", c)
		if err != nil {
			t.Fatal(err)
		}
		clock.Set(200 * ms)
		if _, err := th.Acquire(ctx, "api", c); err != nil {
			t.Fatal(err)
		}
		_, err = th.Acquire(ctx, "api", c)
		var busy *BusyError
		if !errors.As(err, &busy) || busy.InUse != 2 || busy.RetryAfter != 800*ms {
			t.Fatalf("third acquire: %v; want busy, 2 in use, retry after 800ms", err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		d, err := th.Acquire(ctx, "api", c)
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		// d extends in time; the other lease's holder dies, and its lease
		// runs out by itself.
		clock.Set(1100 * ms)
		if err := d.Extend(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Set(1200 * ms)
		if _, err := th.Acquire(ctx, "api", c); err != nil {
			t.Fatalf("after the second lease expired: %v", err)
		}
		if _, err := th.Acquire(ctx, "api", c); !errors.Is(err, ErrBusy) {
			t.Fatalf("want busy, got %v", err)
		}
		// d's lease runs out: it is lost, even with a slot free, since its
		// slot may have served another call meanwhile; the error names the
		// caller's key, not the Redis key.
		clock.Set(3500 * ms)
		var lost *LostError
		if err := d.Extend(ctx); !errors.As(err, &lost) || !errors.Is(err, ErrLeaseLost) || lost.Key != "api" {
			t.Fatalf("extending a lease that ran out: %v; want lost on key \"api\"", err)
		}
		if n, err := th.InUse(ctx, "api"); err != nil || n != 0 {
			t.Fatalf("in use after every lease ran out: %d, %v", n, err)
		}
		if _, err := th.Acquire(ctx, "api", Concurrency{Max: 0}); err == nil {
			t.Fatal("Max 0 accepted")
		}
		if _, err := th.Acquire(ctx, "api", Concurrency{Max: 1, Lease: ms}); err == nil {
			t.Fatal("a lease of 1ms accepted: shorter than MinLease")
		}
	})
}

// TestFailClosed: with Redis unreachable and no fallback, no slot is
// given; with a fallback, this process paces at its share.
func TestFailClosedAndFallback(t *testing.T) {
	m := miniredis.RunT(t)
	addr := m.Addr()
	m.Close() // nothing listens there any more
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * ms, DialerRetries: 1})
	defer client.Close()
	ctx := context.Background()

	closed := newThrottle(t, client, nil, nil)
	if _, err := closed.Reserve(ctx, "k", Limit{Rate: 10}, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve without Redis: %v; want ErrUnavailable", err)
	}
	if _, err := closed.Wait(ctx, "k", Limit{Rate: 10}, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Wait without Redis: %v; want ErrUnavailable", err)
	}

	half := newThrottle(t, client, nil, &Options{Fallback: 0.5})
	var due []time.Time
	for i := 0; i < 4; i++ {
		r, err := half.Reserve(ctx, "k", Limit{Rate: 10}, 1)
		if err != nil || !r.OK || !r.Local {
			t.Fatalf("fallback reserve %d: %+v, %v", i, r, err)
		}
		due = append(due, r.booked.Add(r.Delay))
	}
	// Half of 10/s: slots at least 200ms apart (more only if a failed
	// dial took longer than that).
	for i := 1; i < len(due); i++ {
		if gap := due[i].Sub(due[i-1]); gap < 200*ms {
			t.Fatalf("fallback slots %v apart; want at least 200ms", gap)
		}
	}
	// A peek books nothing, and counts as no reservation.
	if r, err := half.Peek(ctx, "k", Limit{Rate: 10}, 1); err != nil || !r.OK || !r.Local {
		t.Fatalf("fallback peek: %+v, %v", r, err)
	}
	if n := testutil.ToFloat64(half.metrics.reservations.WithLabelValues("default", "local")); n != 4 {
		t.Errorf("local reservations counted %v after 4 reservations and a peek; want 4", n)
	}

	// The fallback keeps to the pauses this process knows of: one set
	// while Redis is out of reach, and one set before it went.
	if d, err := half.Pause(ctx, "p", Limit{Rate: 10}, time.Minute); d != time.Minute || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Pause without Redis: %v, %v; want a minute and ErrUnavailable", d, err)
	}
	live := miniredis.RunT(t)
	liveClient := redis.NewClient(&redis.Options{Addr: live.Addr(), MaxRetries: -1, DialTimeout: 200 * ms, DialerRetries: 1})
	defer liveClient.Close()
	before := newThrottle(t, liveClient, nil, &Options{Fallback: 0.5})
	if _, err := before.Pause(ctx, "p", Limit{Rate: 10}, time.Minute); err != nil {
		t.Fatal(err)
	}
	live.Close()
	for _, th := range []*Throttle{half, before} {
		r, err := th.Reserve(ctx, "p", Limit{Rate: 10, MaxWait: 2 * time.Minute}, 1)
		if err != nil || !r.Local || r.Paused < 50*time.Second || r.Delay < r.Paused {
			t.Fatalf("fallback reserve in a pause: %+v, %v; want a slot after the pause", r, err)
		}
	}
}

// TestKeyLivesAsLongAsItsBookings: the bucket's TTL always covers the
// slots booked, though a busy key renews it only once in a while (the
// field e marks how far it reaches), and a pause, which may shorten it,
// makes the next booking renew it.
func TestKeyLivesAsLongAsItsBookings(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		lim := Limit{Rate: 1, Per: time.Second, MaxWait: time.Minute}
		k, _ := th.rateKey("ttl")
		marks := map[string]bool{}
		covered := func(r Reservation) {
			t.Helper()
			ttl, err := client.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ttl < r.Delay {
				t.Fatalf("TTL %v is shorter than the slot booked %v ahead", ttl, r.Delay)
			}
		}
		for range 25 {
			r, err := th.Reserve(ctx, "ttl", lim, 1)
			if err != nil || !r.OK {
				t.Fatal(r, err)
			}
			covered(r)
			marks[client.HGet(ctx, k, "e").Val()] = true
		}
		// Slots a second apart: the TTL is renewed when the bookings
		// reach past it, each time half as long again (at 1, 2, 3, 5,
		// 8, 12 and 18 s): fewer than a third of the bookings.
		if len(marks) < 2 || len(marks) > 8 {
			t.Fatalf("the TTL was set %d times in 25 bookings; want 2 to 8", len(marks))
		}
		if _, err := th.Pause(ctx, "ttl", lim, time.Second); err != nil {
			t.Fatal(err)
		}
		if client.HExists(ctx, k, "e").Val() {
			t.Fatal("a pause left the TTL's mark")
		}
		r, err := th.Reserve(ctx, "ttl", lim, 1)
		if err != nil || !r.OK {
			t.Fatal(r, err)
		}
		covered(r)
		if !client.HExists(ctx, k, "e").Val() {
			t.Fatal("the booking after a pause did not renew the TTL")
		}
	})
}

// TestCostBelowOne: a cost below 1 is an invalid cost, as in package
// algorithms, not one that exceeds the burst.
func TestCostBelowOne(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer client.Close()
	th := newThrottle(t, client, nil, nil)
	for _, n := range []int64{0, -1} {
		_, err := th.Reserve(context.Background(), "k", Limit{Rate: 10}, n)
		if !errors.Is(err, algorithms.ErrInvalidCost) || errors.Is(err, algorithms.ErrCostExceedsCapacity) {
			t.Errorf("cost %d: %v; want ErrInvalidCost", n, err)
		}
	}
}

// TestUnreachableIsUnavailable: every verb that finds Redis gone says so
// with ErrUnavailable, Cancel and Release as much as Reserve.
func TestUnreachableIsUnavailable(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialTimeout: 200 * ms, DialerRetries: 1})
	defer client.Close()
	ctx := context.Background()
	th := newThrottle(t, client, nil, nil)
	lim := Limit{Rate: 10}
	th.Reserve(ctx, "k", lim, 1) // the next one waits: Cancel has a slot to give back
	r, err := th.Reserve(ctx, "k", lim, 1)
	if err != nil || !r.OK {
		t.Fatal(r, err)
	}
	l, err := th.Acquire(ctx, "k", Concurrency{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := th.Cancel(ctx, r); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Cancel without Redis: %v; want ErrUnavailable", err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Release without Redis: %v; want ErrUnavailable", err)
	}
	if err := l.Extend(ctx); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Extend without Redis: %v; want ErrUnavailable", err)
	}
}
