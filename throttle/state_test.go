package throttle

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStateAgreesWithTheScripts: State reads, without booking, the same
// next slot and share that the reserve script would answer a Peek with
// (State peeks with no allowed wait, Peek with an hour's),
// through a backlog, a refusal and its pause, the climb back and a
// further rate (Limit.Also); and counts the leases still held.
func TestStateAgreesWithTheScripts(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Name: "api", Rate: 100, MaxWait: time.Hour} // 10 ms apart
		also := Limit{Name: "both", Rate: 100, MaxWait: time.Hour, Also: []Rate{{Rate: 2, Per: time.Second, Counts: CountsCalls}}}
		check := func(at time.Duration, key string, l Limit, paused time.Duration) State {
			t.Helper()
			clock.Set(at)
			st, err := th.State(ctx, key, l)
			if err != nil {
				t.Fatal(err)
			}
			p, err := th.Peek(ctx, key, l, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Now.Equal(base.Add(at)) || st.Next != p.Delay || st.Share != p.Share || st.Paused() != paused {
				t.Fatalf("%s at %v: state %+v (paused %v); the script peeks delay %v, share %v; want paused %v",
					key, at, st, st.Paused(), p.Delay, p.Share, paused)
			}
			if want := 100 * st.Share; st.PerSecond < want-1e-9 || st.PerSecond > want+1e-9 {
				t.Fatalf("%s at %v: %v a second, want %v", key, at, st.PerSecond, want)
			}
			return st
		}
		reserve := func(at time.Duration, key string, l Limit) {
			t.Helper()
			clock.Set(at)
			if r, err := th.Reserve(ctx, key, l, 1); err != nil || !r.OK {
				t.Fatalf("reserve: %+v, %v", r, err)
			}
		}
		if st := check(0, "api", lim, 0); st.Share != 1 || st.Ceiling != 1 || st.Next != 0 || !st.PausedUntil.IsZero() {
			t.Fatalf("a key never used: %+v", st)
		}
		for range 3 {
			reserve(0, "api", lim)
		}
		if st := check(5*ms, "api", lim, 0); st.Next != 25*ms {
			t.Fatalf("three slots booked at 0: next %v, want 25ms", st.Next)
		}
		clock.Set(100 * ms)
		if _, err := th.Backoff(ctx, "api", lim, time.Second); err != nil {
			t.Fatal(err)
		}
		st := check(100*ms, "api", lim, time.Second)
		if !st.PausedUntil.Equal(base.Add(1100*ms)) || st.Share != 0.95 || st.Ceiling != 0.98 {
			t.Fatalf("after a refusal: %+v", st)
		}
		// Climbing back: the share to 97.1%, the ceiling from 98% by 1% a
		// minute.
		if st := check(1150*ms, "api", lim, 0); st.Share != 0.971 || math.Abs(st.Ceiling-0.980175) > 1e-9 {
			t.Fatalf("1.05 s after the refusal: %+v", st)
		}
		reserve(1150*ms, "api", lim)
		check(1151*ms, "api", lim, 0)

		// With a burst the interval the share paces at counts too.
		burst := Limit{Name: "burst", Rate: 100, Burst: 3, MaxWait: time.Hour}
		clock.Set(0)
		if _, err := th.Backoff(ctx, "burst", burst, 100*ms); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			reserve(100*ms, "burst", burst)
		}
		if st := check(100*ms, "burst", burst, 0); st.Next < 10*ms {
			t.Fatalf("four calls of a burst of 3 at 95%%: next %v, want over 10ms", st.Next)
		}

		reserve(0, "both", also)
		reserve(0, "both", also)
		if st := check(10*ms, "both", also, 0); st.Next != 990*ms {
			t.Fatalf("two calls of 2 a second: next %v, want 990ms (the further rate's)", st.Next)
		}

		c := Concurrency{Name: "conc", Max: 3, Lease: time.Second}
		clock.Set(0)
		for range 2 {
			if _, err := th.Acquire(ctx, "conc", c); err != nil {
				t.Fatal(err)
			}
		}
		if st := check(500*ms, "conc", lim, 0); st.Leases != 2 {
			t.Fatalf("%d leases held, want 2", st.Leases)
		}
		if st := check(1500*ms, "conc", lim, 0); st.Leases != 0 {
			t.Fatalf("leases run out: %d held, want 0", st.Leases)
		}
	})
}

// TestStatePauseEndIsStable: on the server's clock, every read of a
// paused key gives the same end, to the microsecond, however far apart
// the reads are: the end is the one Redis stored, not a remaining time
// added to a clock read a moment later. A page that shows it and a test
// that reads it again agree to the millisecond shown.
func TestStatePauseEndIsStable(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		lim := Limit{Name: "api", Rate: 100}
		if _, err := th.Backoff(ctx, "api", lim, time.Minute); err != nil {
			t.Fatal(err)
		}
		var first time.Time
		for i := range 20 {
			st, err := th.State(ctx, "api", lim)
			if err != nil {
				t.Fatal(err)
			}
			if st.Paused() <= 0 || st.PausedUntil.Before(st.Now) {
				t.Fatalf("read %d: not paused: %+v", i, st)
			}
			if i == 0 {
				first = st.PausedUntil
			} else if !st.PausedUntil.Equal(first) {
				t.Fatalf("read %d: the pause ends at %v, the first read said %v", i, st.PausedUntil, first)
			}
			time.Sleep(137 * time.Microsecond) // reads at different µs of the clock
		}
	})
}
