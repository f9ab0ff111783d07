package throttle

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// pairedThrottle returns a Throttle with Options.Pairs whose scripts and
// host both read the clock it returns, at base: the tests step time.
func pairedThrottle(t *testing.T, client redis.UniversalClient) (*Throttle, *fakeClock) {
	clock := &fakeClock{t: base}
	th := newThrottle(t, client, clock.Now, &Options{Pairs: true})
	th.hostNow = clock.Now
	return th, clock
}

// storedTAT returns the TAT key's bucket holds, in µs (a, rounding f down).
func storedTAT(t *testing.T, th *Throttle, key string) int64 {
	t.Helper()
	k, err := th.rateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	a, err := th.client.HGet(context.Background(), k, "a").Result()
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// bookPair makes three calls on "api" under lim at the clock's time: the
// third books a pair (slots 2 and 3, at 200 and 300 ms with 10 a second)
// and is returned.
func bookPair(t *testing.T, th *Throttle, lim Limit) Reservation {
	t.Helper()
	var r Reservation
	for range 3 {
		var err error
		if r, err = th.Reserve(context.Background(), "api", lim, 1); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestPairsKeepThePace: a process that calls a busy key faster than its
// slots come books two slots in one step and hands the second to its next
// call without asking Redis; the calls get the same evenly spaced slots
// as one booking each would give them.
func TestPairsKeepThePace(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th, clock := pairedThrottle(t, client)
		ctx := context.Background()
		lim := Limit{Rate: 10, MaxWait: 10 * time.Second} // 100 ms apart
		var tats []int64
		for i := range 7 {
			clock.Set(time.Duration(i) * ms)
			r, err := th.Reserve(ctx, "api", lim, 1)
			if err != nil || !r.OK {
				t.Fatalf("call %d: %v, %v", i, r, err)
			}
			// Slot i is i intervals after the first call, seen from
			// call i's time.
			if want := time.Duration(i)*100*ms - time.Duration(i)*ms; r.Delay != want {
				t.Errorf("call %d: delay %v, want %v", i, r.Delay, want)
			}
			tats = append(tats, storedTAT(t, th, "api"))
		}
		// Calls 0 and 1 book alone (nothing is ahead yet), 2 books 2 and
		// 3, 4 books 4 and 5, 6 books 6 and 7: the calls that took a kept
		// slot left the bucket as it was.
		for _, i := range []int{3, 5} {
			if tats[i] != tats[i-1] {
				t.Errorf("call %d moved the bucket (%d to %d): it should have taken the kept slot", i, tats[i-1], tats[i])
			}
		}
		for _, i := range []int{1, 2, 4, 6} {
			if tats[i] == tats[i-1] {
				t.Errorf("call %d did not book", i)
			}
		}
	})
}

// TestPairsLateKeptSlotIsAGap: a kept slot that no call takes until well
// after it is dropped as a late gap, and the next call books afresh.
func TestPairsLateKeptSlotIsAGap(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th, clock := pairedThrottle(t, client)
		ctx := context.Background()
		lim := Limit{Name: "late", Rate: 10, MaxWait: 10 * time.Second}
		bookPair(t, th, lim)
		clock.Set(400 * ms) // slot 3 is 100 ms past: more than half an interval
		r, err := th.Reserve(ctx, "api", lim, 1)
		if err != nil || !r.OK || r.Delay != 0 {
			t.Fatalf("after the kept slot's time: %v, %v; want a fresh slot due now", r, err)
		}
		if got := storedTAT(t, th, "api") - base.UnixMicro(); got != 500_000 {
			t.Errorf("the bucket's TAT is %d µs after base, want 500000 (booked afresh at 400 ms)", got)
		}
		if n := testutil.ToFloat64(th.metrics.reservations.WithLabelValues("late", "late")); n != 1 {
			t.Errorf("late reservations %v, want 1", n)
		}
	})
}

// TestPairsPauseVoidsBothSlots: a pause announced after a pair was booked
// voids both of its slots when they come before the pause's end, and
// Cancel gives neither back.
func TestPairsPauseVoidsBothSlots(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th, _ := pairedThrottle(t, client)
		ctx := context.Background()
		lim := Limit{Rate: 10, MaxWait: 10 * time.Second}
		first := bookPair(t, th, lim)
		if !first.paired {
			t.Fatal("the third call did not book a pair")
		}
		before := storedTAT(t, th, "api")
		if ok, err := th.Cancel(ctx, first); ok || err != nil {
			t.Fatalf("Cancel of a paired slot: %v, %v; want false", ok, err)
		}
		if storedTAT(t, th, "api") != before {
			t.Fatal("Cancel of a paired slot moved the bucket")
		}
		kept, err := th.Reserve(ctx, "api", lim, 1)
		if err != nil || !kept.paired || kept.Delay != 300*ms {
			t.Fatalf("the kept slot: %v, %v; want the paired slot at 300 ms", kept, err)
		}
		if _, err := th.Pause(ctx, "api", lim, 250*ms); err != nil {
			t.Fatal(err)
		}
		// The pause ends at 250 ms: the first slot (200 ms) is void, the
		// kept one (300 ms) is not.
		cctx, cancel := context.WithTimeout(ctx, 0)
		defer cancel()
		if ok, err := th.Await(cctx, first); ok || err != nil {
			t.Errorf("Await of the first slot of the pair: %v, %v; want void (false, nil)", ok, err)
		}
		if _, err := th.Pause(ctx, "api", lim, 350*ms); err != nil {
			t.Fatal(err)
		}
		if ok, err := th.Await(cctx, kept); ok || err != nil {
			t.Errorf("Await of the kept slot after a pause to 350 ms: %v, %v; want void (false, nil)", ok, err)
		}
	})
}

// TestPairsOnlyForBusyKeys: calls further apart than their slots are
// ahead book one slot each, so an idle key never keeps a slot nobody uses.
func TestPairsOnlyForBusyKeys(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th, clock := pairedThrottle(t, client)
		ctx := context.Background()
		lim := Limit{Rate: 10, MaxWait: 10 * time.Second}
		for i := range 5 {
			clock.Set(time.Duration(i) * 150 * ms)
			r, err := th.Reserve(ctx, "api", lim, 1)
			if err != nil || !r.OK || r.paired || r.Delay != 0 {
				t.Fatalf("call %d, 150 ms after the last: %+v, %v; want a single slot due now", i, r, err)
			}
		}
	})
}

// TestPairsForgetIdleKeys: what a process keeps per key is dropped once
// the key has been idle a minute and many keys are known, so per-tenant
// keys do not pile up.
func TestPairsForgetIdleKeys(t *testing.T) {
	m, _ := NewMetrics(nil)
	c, err := Limit{Rate: 10}.compile()
	if err != nil {
		t.Fatal(err)
	}
	var p pairs
	for i := range 5000 {
		p.call("tenant-"+strconv.Itoa(i), c, 1, base, m)
	}
	p.call("busy", c, 1, base.Add(2*time.Minute), m)
	if n := len(p.keys); n != 1 {
		t.Fatalf("%d keys kept after 5,000 went idle for two minutes; want 1", n)
	}
}

// TestPairsKeepEverySpare: two pairs booked at once by two calls of one
// process (neither saw the other's spare) leave two kept slots; the next
// two calls take both, the earlier first, so no booked slot is lost.
func TestPairsKeepEverySpare(t *testing.T) {
	m, _ := NewMetrics(nil)
	c, err := Limit{Rate: 10}.compile()
	if err != nil {
		t.Fatal(err)
	}
	var p pairs
	p.call("api", c, 1, base, m)
	spare := func(d time.Duration) *Reservation {
		return &Reservation{OK: true, Delay: d, n: 1, booked: base, compile: c, tats: []tat{{pr: c.pr}}, queued: true, paired: true}
	}
	p.booked("api", 0, 0, spare(400*ms))
	p.booked("api", 0, 0, spare(300*ms))
	for _, want := range []time.Duration{300 * ms, 400 * ms} {
		r, kept, _ := p.call("api", c, 1, base, m)
		if !kept || r.Delay != want {
			t.Fatalf("call: kept %v, delay %v; want the kept slot at %v", kept, r.Delay, want)
		}
	}
	if _, kept, _ := p.call("api", c, 1, base, m); kept {
		t.Fatal("a third call found a kept slot; only two were booked")
	}
}

// TestPairsNotForLeasedKeys: a key whose calls here lease a concurrency
// slot first books one slot a call, however busy: its next call waits for
// a lease that may go to another process, and a kept slot with it.
func TestPairsNotForLeasedKeys(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th, _ := pairedThrottle(t, client)
		l, err := th.Acquire(context.Background(), "api", Concurrency{Max: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(context.Background())
		if r := bookPair(t, th, Limit{Rate: 10, MaxWait: 10 * time.Second}); r.paired {
			t.Fatalf("a leased key booked a pair: %+v", r)
		}
	})
}

// scriptCounter counts the scripts a client sends (EVALSHA and EVAL).
type scriptCounter struct{ n int }

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			c.n++
		}
		return next(ctx, cmd)
	}
}

// TestPairsNotBeyondMaxWait: a busy key whose slots come near its
// MaxWait books one slot a script: a pair there would be refused for its
// second slot and the call booked again, two scripts for one slot.
func TestPairsNotBeyondMaxWait(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer client.Close()
	var count scriptCounter
	client.AddHook(&count)
	th, _ := pairedThrottle(t, client)
	// Slots at 0, 100 and 200 ms: a pair at 200 and 300 ms would not fit.
	lim := Limit{Rate: 10, MaxWait: 250 * time.Millisecond}
	if _, err := th.Reserve(context.Background(), "warm", lim, 1); err != nil { // loads the script
		t.Fatal(err)
	}
	count.n = 0
	if r := bookPair(t, th, lim); r.paired || !r.OK || r.Delay != 200*ms {
		t.Fatalf("third call: %+v; want a single slot at 200 ms", r)
	}
	if count.n != 3 {
		t.Errorf("%d scripts for three calls; want 3", count.n)
	}
}
