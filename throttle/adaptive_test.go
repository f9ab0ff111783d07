package throttle

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestBackoffStepsTheShareDownAndBack: a refusal steps the fleet's share
// of the rate down to 95% (its ceiling to 98%), once per pause however
// many calls come back refused; the share climbs back at 2% of the rate a
// second to the ceiling, the ceiling at 1% a minute to the whole rate;
// slots are spaced at the paced interval; and the share never falls
// below minShare.
func TestBackoffStepsTheShareDownAndBack(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 100, MaxWait: time.Hour} // 10 ms apart at the whole rate
		reserve := func(at time.Duration) Reservation {
			t.Helper()
			clock.Set(at)
			r, err := th.Reserve(ctx, "api", lim, 1)
			if err != nil || !r.OK {
				t.Fatalf("reserve at %v: %+v, %v", at, r, err)
			}
			return r
		}
		backoff := func(at time.Duration) {
			t.Helper()
			clock.Set(at)
			if _, err := th.Backoff(ctx, "api", lim, time.Second); err != nil {
				t.Fatal(err)
			}
		}
		near := func(what string, got, want float64) {
			t.Helper()
			if math.Abs(got-want) > 0.0001 {
				t.Fatalf("%s: share %.4f, want %.4f", what, got, want)
			}
		}
		if r := reserve(0); r.Share != 1 {
			t.Fatalf("before any refusal: share %v, want 1", r.Share)
		}
		backoff(100 * ms)
		backoff(150 * ms) // another call in flight, refused too: no second step
		// At the pause's end (1.15 s) the share has climbed 2% of the rate
		// a second for 1.05 s from 95%: 97.1%, under the 98% ceiling.
		r := reserve(1150 * ms)
		near("1.05 s after the step", r.Share, 0.971)
		if r.Delay != 0 {
			t.Fatalf("first slot after the pause: delay %v, want 0", r.Delay)
		}
		// The next slot is one paced interval later: 10 ms / 0.971.
		if r := reserve(1150 * ms); r.Delay != 10299*time.Microsecond {
			t.Fatalf("second slot: delay %v, want 10.299ms", r.Delay)
		}
		// By 2.6 s it reaches the ceiling (98%, which has crept up by 1%
		// a minute for 2.5 s: 98.0417%) and stays under it.
		near("at the ceiling", reserve(2600*ms).Share, 0.9804)
		// A refusal after the pause steps down again, from 98.04%.
		backoff(3 * time.Second)
		near("after the second step", reserve(3*time.Second).Share, 0.9314)
		// Minutes later the ceiling is back at the whole rate, and so is
		// the share.
		near("after 10 minutes", reserve(10*time.Minute).Share, 1)
		// However many refusals, the share stays at minShare or more.
		for i := range 200 {
			backoff(11*time.Minute + time.Duration(i)*time.Second)
		}
		near("after 200 refusals", reserve(11*time.Minute+200*time.Second).Share, minShare)
	})
}

// TestPauseDoesNotSlow: Pause alone (maintenance, not a refusal) leaves
// the pace as it was.
func TestPauseDoesNotSlow(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 100, MaxWait: time.Hour}
		if _, err := th.Pause(ctx, "api", lim, time.Second); err != nil {
			t.Fatal(err)
		}
		clock.Set(time.Second)
		for range 2 {
			r, err := th.Reserve(ctx, "api", lim, 1)
			if err != nil || r.Share != 1 {
				t.Fatalf("after a pause: %+v, %v; want the whole rate", r, err)
			}
		}
	})
}

// TestLateSlotLeftAsAGap: a caller that wakes more than half an interval
// (at least 5 ms) after its slot does not use it, since its call would
// bunch with the calls on time after it; it books again. A slot that was
// due at once is used however late the caller gets to it.
func TestLateSlotLeftAsAGap(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		lim := Limit{Rate: 10, MaxWait: time.Hour} // 100 ms apart
		first, err := th.Reserve(ctx, "api", lim, 1)
		if err != nil || !first.OK || first.Delay != 0 {
			t.Fatalf("first: %+v, %v", first, err)
		}
		second, err := th.Reserve(ctx, "api", lim, 1)
		if err != nil || !second.OK || second.Delay == 0 {
			t.Fatalf("second: %+v, %v", second, err)
		}
		if second.maxLate() != 50*ms {
			t.Fatalf("maxLate %v, want 50ms", second.maxLate())
		}
		// The process stalls: its clock reads a second later when it wakes.
		th.hostNow = func() time.Time { return time.Now().Add(time.Second) }
		if ok, err := th.Await(ctx, second); ok || err != nil {
			t.Fatalf("a slot 900 ms late: used %v, %v; want left as a gap", ok, err)
		}
		if ok, err := th.Await(ctx, first); !ok || err != nil {
			t.Fatalf("a slot due at once, a second late: used %v, %v; want used", ok, err)
		}
	})
}

// TestOneRefusedCallerCannotDragTheShare: the reported fault, on the
// scripts' clock. A key paced at 20/s serves calls that all succeed but
// one, whose call (a path that always answers 429 Retry-After: 1) comes
// back refused every 1.2 s, as often as its put-back allows. For 5
// minutes the fleet's share stays at minShare or above (it fell to 5%
// before the floor); and it is back to the whole rate within minutes once
// the refusals stop.
func TestOneRefusedCallerCannotDragTheShare(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 20, MaxWait: time.Hour}
		least, calls := 1.0, 0
		var at, refusal time.Duration
		for at < 5*time.Minute {
			if at >= refusal {
				if _, err := th.Backoff(ctx, "api", lim, time.Second); err != nil {
					t.Fatal(err)
				}
				refusal = at + 1200*time.Millisecond
			}
			clock.Set(at)
			r, err := th.Reserve(ctx, "api", lim, 1)
			if err != nil || !r.OK {
				t.Fatalf("reserve at %v: %+v, %v", at, r, err)
			}
			least, calls = min(least, r.Share), calls+1
			at += r.Delay // the call leaves at its slot
		}
		t.Logf("%d calls in 5 minutes beside 250 refusals; the least share %.4f", calls, least)
		if least < minShare {
			t.Fatalf("the share fell to %.4f; want at least minShare, %v", least, minShare)
		}
		clock.Set(at + 30*time.Minute)
		if r, err := th.Reserve(ctx, "api", lim, 1); err != nil || r.Share != 1 {
			t.Fatalf("30 minutes after the last refusal: %+v, %v; want the whole rate", r, err)
		}
	})
}
