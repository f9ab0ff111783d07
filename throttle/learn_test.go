package throttle

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// learnedRatio is the rule of throttle_settle.lua: the sums of the real
// and the estimated costs, each settle's weight falling by 1/32 with
// every settle after it, from 8 calls' worth of the first estimate.
type learnedRatio struct{ n, d, w float64 }

func (l *learnedRatio) settle(est, actual int64) {
	if l.d == 0 {
		l.n, l.d, l.w = 8*float64(est), 8*float64(est), 8*float64(est)
	}
	l.n = l.n*31/32 + float64(actual)
	l.d = l.d*31/32 + float64(est)
	l.w = l.w * 31 / 32
}

// burst is the burst a bucket of burst b opens to a call of est.
func (l *learnedRatio) burst(est, b int64) int64 {
	known := 0.0
	if l.d > 0 {
		known = 1 - l.w/l.d
	}
	return max(l.book(est, b), int64(math.Floor(float64(b)*known)))
}

// book is what a call of estimate est books in a bucket of burst b.
func (l *learnedRatio) book(est, b int64) int64 {
	if l.d == 0 {
		return est
	}
	return max(1, min(b, int64(math.Floor(float64(est)*l.n/l.d+0.5))))
}

// tatOf reads bucket field f of key's hash: its TAT in µs from base.
func tatOf(t *testing.T, client redis.UniversalClient, th *Throttle, f string) int64 {
	t.Helper()
	k, _ := th.rateKey("api")
	v, err := client.HGet(context.Background(), k, f).Result()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := strconv.ParseInt(v, 10, 64)
	return a - base.UnixMicro()
}

// TestLearnBooksTheSettledRatio: under a Limit that learns, each settle
// teaches the key the ratio of real to estimated cost, and a call books
// its estimate times that ratio: the bucket moves by the booked count,
// the settle then by real minus booked. Calls whose estimate is a quarter
// of their real cost book ever nearer to the real cost.
func TestLearnBooksTheSettledRatio(t *testing.T) {
	lim := Limit{Rate: 100, Burst: 1000, Guard: -1, MaxWait: time.Minute, Learn: true} // 10 ms a unit
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		var ref learnedRatio
		last := int64(0)
		for i := range 64 {
			at := time.Duration(i) * time.Second // the bucket is empty again at each step
			clock.Set(at)
			r, err := th.Reserve(ctx, "api", lim, 10)
			if err != nil || !r.OK || r.Delay != 0 {
				t.Fatalf("step %d: reserve: %+v, %v", i, r, err)
			}
			want := ref.book(10, lim.Burst)
			if r.Booked() != want || r.Cost() != 10 {
				t.Fatalf("step %d: booked %d (cost %d); want %d of an estimate of 10", i, r.Booked(), r.Cost(), want)
			}
			if r.Booked() < last || r.Booked() > 40 {
				t.Fatalf("step %d: booked %d after %d: the ratio learned does not climb towards 4", i, r.Booked(), last)
			}
			last = r.Booked()
			if got := tatOf(t, client, th, "a"); got != at.Microseconds()+want*10_000 {
				t.Fatalf("step %d: TAT %dµs after booking %d; want %d", i, got, want, at.Microseconds()+want*10_000)
			}
			if err := th.Settle(ctx, r, 40); err != nil {
				t.Fatal(err)
			}
			ref.settle(10, 40)
			if got := tatOf(t, client, th, "a"); got != at.Microseconds()+400_000 {
				t.Fatalf("step %d: TAT %dµs after settling %d to 40; want 400ms: a settle moves by real minus booked", i, got, want)
			}
		}
		if last < 38 {
			t.Errorf("after 64 settles of 40 for an estimate of 10 a call books %d; want about 40", last)
		}
	})
}

// TestLearnFirstSettleDoesNotSwing: one call that cost nothing does not
// teach the key to book next to nothing (8 calls' worth of the estimate
// weigh against it).
func TestLearnFirstSettleDoesNotSwing(t *testing.T) {
	lim := Limit{Rate: 100, Burst: 1000, Guard: -1, MaxWait: time.Minute, Learn: true}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		r, _ := th.Reserve(ctx, "api", lim, 100)
		if err := th.Settle(ctx, r, 0); err != nil {
			t.Fatal(err)
		}
		r, _ = th.Reserve(ctx, "api", lim, 100)
		if r.Booked() != 89 { // 100 × 775/875
			t.Errorf("after one settle of 0 for 100 a call of 100 books %d; want 89", r.Booked())
		}
	})
}

// TestLearnBuckets: the learned ratio scales every bucket that counts
// cost, each at most its burst, and leaves a bucket that counts calls at
// one; Cancel gives back what was booked.
func TestLearnBuckets(t *testing.T) {
	lim := Limit{Rate: 100, Burst: 100, Guard: -1, MaxWait: time.Minute, Learn: true, Also: []Rate{
		{Rate: 2, Burst: 2, Counts: CountsCalls}, // T 500ms
		{Rate: 600, Per: time.Minute, Burst: 20}, // T 100ms
	}}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		var ref learnedRatio
		for i := range 40 { // real cost 8 times the estimate
			clock.Set(time.Duration(i) * time.Minute)
			r, err := th.Reserve(ctx, "api", lim, 5)
			if err != nil || !r.OK {
				t.Fatalf("step %d: %+v, %v", i, r, err)
			}
			if err := th.Settle(ctx, r, 40); err != nil {
				t.Fatal(err)
			}
			ref.settle(5, 40)
		}
		at := 40 * time.Minute
		clock.Set(at)
		r, err := th.Reserve(ctx, "api", lim, 5)
		if err != nil || !r.OK || r.Delay != 0 {
			t.Fatalf("reserve: %+v, %v", r, err)
		}
		own, tokens := ref.book(5, 100), ref.book(5, 20)
		if own < 30 || tokens != 20 {
			t.Fatalf("reference: own %d, tokens %d", own, tokens)
		}
		if r.Booked() != own || r.tats[1].n != 1 || r.tats[2].n != tokens {
			t.Fatalf("booked %d, %d, %d; want %d, 1 (it counts calls), %d (its burst)", r.Booked(), r.tats[1].n, r.tats[2].n, own, tokens)
		}
		us := at.Microseconds()
		for f, want := range map[string]int64{"a": us + own*10_000, "a1": us + 500_000, "a2": us + tokens*100_000} {
			if got := tatOf(t, client, th, f); got != want {
				t.Errorf("field %s: TAT %d; want %d", f, got, want)
			}
		}
		if ok, err := th.Cancel(ctx, r); !ok || err != nil {
			t.Fatalf("cancel: %v, %v", ok, err)
		}
		for _, f := range []string{"a", "a1", "a2"} {
			if got := tatOf(t, client, th, f); got > us {
				t.Errorf("field %s: TAT %dµs after the cancel; want back at now (%d)", f, got, us)
			}
		}
	})
}

// TestNoLearnWithoutLearn: a Limit that does not learn books the
// estimate even where the key has learned a ratio, and its settles
// teach nothing.
func TestNoLearnWithoutLearn(t *testing.T) {
	learn := Limit{Rate: 100, Burst: 1000, Guard: -1, MaxWait: time.Minute, Learn: true}
	plain := learn
	plain.Learn = false
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lk, _ := th.learnKey("api")
		r, _ := th.Reserve(ctx, "api", plain, 10)
		if err := th.Settle(ctx, r, 40); err != nil {
			t.Fatal(err)
		}
		if n, _ := client.Exists(ctx, lk).Result(); n != 0 {
			t.Fatal("a settle under a Limit that does not learn wrote the learned estimate")
		}
		r, _ = th.Reserve(ctx, "api", learn, 10)
		if err := th.Settle(ctx, r, 40); err != nil {
			t.Fatal(err)
		}
		if r, _ = th.Reserve(ctx, "api", learn, 10); r.Booked() != 13 { // 10 × 117.5/87.5
			t.Errorf("learning: booked %d; want 13", r.Booked())
		}
		if r, _ = th.Reserve(ctx, "api", plain, 10); r.Booked() != 10 {
			t.Errorf("not learning: booked %d; want the estimate, 10", r.Booked())
		}
	})
}

// TestLearnSlotBookedAheadWaitsForLaterDebt: a call booked ahead of its
// slot booked before the calls in flight settled; under a Limit that
// learns it starts later by their net debt (what they overran less what
// others gave back), and a call booked after the settles owes nothing.
func TestLearnSlotBookedAheadWaitsForLaterDebt(t *testing.T) {
	lim := Limit{Rate: 1000, Burst: 10, Guard: -1, MaxWait: time.Minute, Learn: true} // 1 ms a unit
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		a, _ := th.Reserve(ctx, "api", lim, 10)
		b, _ := th.Reserve(ctx, "api", lim, 10)
		c, _ := th.Reserve(ctx, "api", lim, 10)
		if a.Delay != 0 || b.Delay != 10*ms || c.Delay != 20*ms {
			t.Fatalf("slots in %v, %v, %v; want 0, 10ms, 20ms", a.Delay, b.Delay, c.Delay)
		}
		if err := th.Settle(ctx, a, 260); err != nil { // 250 units of debt
			t.Fatal(err)
		}
		if err := th.Settle(ctx, b, 0); err != nil { // 10 given back
			t.Fatal(err)
		}
		if got := th.settledSince(ctx, c); got != 240*ms {
			t.Errorf("c, booked before both settles: %v later; want 240ms", got)
		}
		if got := th.settledSince(ctx, b); got != 240*ms {
			t.Errorf("b, booked before both settles (its own included): %v later; want 240ms", got)
		}
		d, _ := th.Reserve(ctx, "api", lim, 10)
		if got := th.settledSince(ctx, d); got != 0 {
			t.Errorf("d, booked after the settles: %v later; want 0", got)
		}
		plain := lim
		plain.Learn = false
		e, _ := th.Reserve(ctx, "api", plain, 10)
		if e.settled != 0 {
			t.Errorf("a reservation that does not learn carries %d settled units", e.settled)
		}
	})
}

// TestLearnAwaitWaitsForLaterDebt: Await sleeps past a slot booked ahead
// by the debt settled since (on the servers' own clock, in real time).
func TestLearnAwaitWaitsForLaterDebt(t *testing.T) {
	lim := Limit{Rate: 1000, Burst: 10, Guard: -1, MaxWait: time.Minute, Learn: true}
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		start := time.Now()
		a, _ := th.Reserve(ctx, "api", lim, 10)
		b, err := th.Reserve(ctx, "api", lim, 10)
		if err != nil || !b.OK || b.Delay <= 0 {
			t.Fatalf("b: %+v, %v; want a slot booked ahead", b, err)
		}
		if err := th.Settle(ctx, a, 210); err != nil { // 200 ms of debt
			t.Fatal(err)
		}
		if ok, err := th.Await(ctx, b); !ok || err != nil {
			t.Fatalf("Await: %v, %v", ok, err)
		}
		if waited := time.Since(start); waited < 200*ms {
			t.Errorf("b started %v after booking; want at least its 10 ms and the 200 ms of debt settled since", waited)
		}
	})
}

// TestLearnOpensTheBurstAsItLearns: under a Limit that learns, calls
// whose cost nobody knows yet start one after another at the rate, not a
// burst's worth at once; the burst opens as settles teach the ratio, by
// the share of it they taught. A Limit that does not learn bursts at once.
func TestLearnOpensTheBurstAsItLearns(t *testing.T) {
	lim := Limit{Rate: 100, Burst: 100, Guard: -1, MaxWait: time.Minute, Learn: true} // 10 ms a unit
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		for i, want := range []time.Duration{0, 100 * ms, 200 * ms} {
			if r, _ := th.Reserve(ctx, "api", lim, 10); !r.OK || r.Delay != want {
				t.Fatalf("call %d before any settle: slot in %v; want %v", i, r.Delay, want)
			}
		}
		plain := lim
		plain.Learn = false
		for i := range 3 {
			if r, _ := th.Reserve(ctx, "other", plain, 10); !r.OK || r.Delay != 0 {
				t.Fatalf("call %d not learning: slot in %v; want at once", i, r.Delay)
			}
		}
		var ref learnedRatio
		step, total := time.Duration(0), 0
		for _, settles := range []int{1, 8, 40} {
			total += settles
			for range settles {
				step += time.Minute
				clock.Set(step)
				r, _ := th.Reserve(ctx, "api", lim, 10)
				if err := th.Settle(ctx, r, 10); err != nil {
					t.Fatal(err)
				}
				ref.settle(10, 10)
			}
			step += time.Minute
			clock.Set(step)
			at := 0
			for {
				r, _ := th.Reserve(ctx, "api", lim, 10)
				if r.Delay > 0 {
					break
				}
				at++
			}
			if want := int(ref.burst(10, 100) / 10); at != want {
				t.Errorf("after %d settles: %d calls at once; want %d (burst %d)", total, at, want, ref.burst(10, 100))
			}
			if total == 49 && at < 7 {
				t.Errorf("after 49 settles only %d calls at once of a burst of 10", at)
			}
		}
	})
}
