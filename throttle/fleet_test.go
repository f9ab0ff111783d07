package throttle

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// realTargets are the real redis-server processes: behaviour that involves
// many connections, pub/sub or real time is tested there.
func forEachRealTarget(t *testing.T, f func(t *testing.T, client redis.UniversalClient)) {
	t.Run("redis-standalone", func(t *testing.T) { f(t, redistest.Shared(t)) })
	t.Run("redis-cluster", func(t *testing.T) { f(t, redistest.SharedCluster(t)) })
}

// maxIn returns the most slots in any half-open window of the given width.
func maxIn(slots []time.Time, width time.Duration) int {
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	most, j := 0, 0
	for i := range slots {
		for !slots[j].After(slots[i].Add(-width)) {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// TestFleetScheduleNeverExceedsQuota: several Throttles (processes) with
// many goroutines each book slots concurrently, in batches at simulated
// times; the booked slots never hold more than the quota in any window of
// its period, nor in any window of a tenth of it.
func TestFleetScheduleNeverExceedsQuota(t *testing.T) {
	forEachRealTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		prefix := redistest.KeyPrefix(t) + "th"
		var fleet []*Throttle
		for i := 0; i < 3; i++ {
			fleet = append(fleet, newThrottle(t, client, clock.Now, &Options{Prefix: prefix}))
		}
		lim := Limit{Rate: 200, Per: time.Second, MaxWait: 300 * ms}
		rng := rand.New(rand.NewPCG(9, 9))
		var (
			mu    sync.Mutex
			slots []time.Time
		)
		ctx := context.Background()
		var at time.Duration
		for batch := 0; batch < 40; batch++ {
			at += time.Duration(rng.Int64N(int64(60 * ms)))
			clock.Set(at)
			now := clock.Now().Truncate(time.Microsecond) // the scripts count whole µs
			var wg sync.WaitGroup
			for g := 0; g < 24; g++ {
				th := fleet[g%len(fleet)]
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := th.Reserve(ctx, "api", lim, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if r.OK {
						mu.Lock()
						slots = append(slots, now.Add(r.Delay))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		if len(slots) < 200 {
			t.Fatalf("only %d slots booked", len(slots))
		}
		slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
		// Evenly spaced: no two slots closer than the interval.
		for i := 1; i < len(slots); i++ {
			if gap := slots[i].Sub(slots[i-1]); gap < 5*ms {
				t.Fatalf("slots %d and %d are %v apart; the interval is 5ms", i-1, i, gap)
			}
		}
		if got := maxIn(slots, time.Second); got > 200 {
			t.Fatalf("%d slots in one second; quota 200", got)
		}
		if got := maxIn(slots, 100*ms); got > 20 {
			t.Fatalf("%d slots in 100ms; quota 20", got)
		}
	})
}

// TestFleetScheduleKeepsABurstyQuota: as TestFleetScheduleNeverExceedsQuota
// with a burst (and so the guard): the slots booked by many processes
// and goroutines, in batches at random times with idle spells between
// some, never overflow the API's leaky bucket of the same rate and size,
// and no window of the period holds more than Rate + Burst - 1 units.
func TestFleetScheduleKeepsABurstyQuota(t *testing.T) {
	forEachRealTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{t: base}
		prefix := redistest.KeyPrefix(t) + "th"
		var fleet []*Throttle
		for range 3 {
			fleet = append(fleet, newThrottle(t, client, clock.Now, &Options{Prefix: prefix}))
		}
		lim := Limit{Rate: 100, Per: time.Second, Burst: 20, MaxWait: 300 * ms}
		rng := rand.New(rand.NewPCG(4, 7))
		var (
			mu    sync.Mutex
			slots []time.Duration
		)
		ctx := context.Background()
		var at time.Duration
		for range 60 {
			at += time.Duration(rng.Int64N(int64(400 * ms))).Truncate(time.Microsecond) // the scripts count whole µs
			clock.Set(at)
			var wg sync.WaitGroup
			for g := range 1 + rng.IntN(30) {
				wg.Go(func() {
					r, err := fleet[g%len(fleet)].Reserve(ctx, "api", lim, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if r.OK {
						mu.Lock()
						slots = append(slots, at+r.Delay)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
		}
		if len(slots) < 300 {
			t.Fatalf("only %d slots booked", len(slots))
		}
		if got := (&apiBucket{size: 20, interval: 10 * ms}).refusals(slots); len(got) > 0 {
			t.Fatalf("the API's bucket of 20 at 100/s refuses %d of %d slots", len(got), len(slots))
		}
		times := make([]time.Time, len(slots))
		for i, s := range slots {
			times[i] = base.Add(s)
		}
		if got := maxIn(times, time.Second); got > 119 {
			t.Fatalf("%d slots in one second; at most 119 (100 and a burst of 20)", got)
		}
	})
}

// TestWaitNeverEarlyWhateverTheHostClock: processes whose clocks are a
// minute ahead and a minute behind share one key. Each call starts no
// earlier than its slot, and its deadline is the slot's delay counted on
// its own host's clock from when the reply came: the hosts' clocks play
// no part. (A deadline taken from Redis's clock would put one process's
// calls a minute late, the other's a minute early.)
func TestWaitNeverEarlyWhateverTheHostClock(t *testing.T) {
	forEachRealTarget(t, func(t *testing.T, client redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t) + "th"
		lim := Limit{Rate: 50, MaxWait: 5 * time.Second}
		var (
			mu   sync.Mutex
			tats []int64 // each reservation's bucket TAT, in µs on Redis's clock
		)
		var wg sync.WaitGroup
		for i, skew := range []time.Duration{time.Minute, -time.Minute} {
			th := newThrottle(t, client, nil, &Options{Prefix: prefix})
			th.hostNow = func() time.Time { return time.Now().Add(skew) }
			for g := 0; g < 4; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < 5; k++ {
						before := time.Now()
						r, err := th.Wait(context.Background(), "api", lim, 1)
						after := time.Now()
						if err != nil {
							t.Errorf("process %d: %v", i, err)
							return
						}
						if slept := after.Sub(before); slept < r.Delay || slept > r.Delay+skew.Abs()/2 {
							t.Errorf("process %d (skew %v) waited %v for a slot %v away", i, skew, slept, r.Delay)
						}
						// The deadline, r.booked+r.Delay, is on the host's
						// clock, read when the reply came.
						if booked := r.booked.Add(-skew); booked.Before(before) || booked.After(after) || r.Delay > lim.MaxWait {
							t.Errorf("process %d (skew %v): booked %v into a call that took %v (delay %v): not on the host's clock",
								i, skew, booked.Sub(before), after.Sub(before), r.Delay)
						}
						if !r.queued {
							t.Errorf("process %d: a slot not booked on Redis: %+v", i, r)
							return
						}
						mu.Lock()
						tats = append(tats, r.tats[0].a)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		// The slots, read on Redis's clock where they are decided, are one
		// interval (20ms) apart whatever the hosts' clocks say. (Arrival
		// times on this host would also carry the scheduler's delays.)
		slices.Sort(tats)
		for i := 1; i < len(tats); i++ {
			if gap := tats[i] - tats[i-1]; gap < 20_000 {
				t.Fatalf("slots %dµs apart on Redis's clock; at 50/s they are 20000µs apart", gap)
			}
		}
		if len(tats) != 40 {
			t.Fatalf("%d slots booked; want 40", len(tats))
		}
	})
}

// TestPauseStopsTheFleet: a pause set by one process wakes another
// process's waiter whose slot falls inside it, at once, and the slot is
// not used; booking again gives no slot within the allowed wait. The slot
// is a minute away, so a waiter that the pause did not reach would wake
// a minute late, not a busy machine's few seconds.
func TestPauseStopsTheFleet(t *testing.T) {
	forEachRealTarget(t, func(t *testing.T, client redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t) + "th"
		a := newThrottle(t, client, nil, &Options{Prefix: prefix})
		b := newThrottle(t, client, nil, &Options{Prefix: prefix})
		lim := Limit{Rate: 1, Per: time.Minute, MaxWait: 2 * time.Minute}
		ctx := context.Background()
		if _, err := b.Reserve(ctx, "api", lim, 1); err != nil {
			t.Fatal(err)
		}
		r, err := b.Reserve(ctx, "api", lim, 1)
		if err != nil || !r.OK || r.Delay < 50*time.Second {
			t.Fatalf("second slot: %+v, %v; want one about a minute away", r, err)
		}
		type result struct {
			ok  bool
			err error
		}
		done := make(chan result, 1)
		started := time.Now()
		go func() {
			ok, err := b.Await(ctx, r)
			done <- result{ok, err}
		}()
		if _, err := a.Pause(ctx, "api", lim, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		res := <-done
		if res.err != nil || res.ok {
			t.Fatalf("await: ok=%v err=%v; want the slot voided by the pause", res.ok, res.err)
		}
		if took := time.Since(started); took >= r.Delay {
			t.Fatalf("the waiter woke after %v, at its slot: the pause did not reach it", took)
		}
		_, err = b.Wait(ctx, "api", lim, 1)
		var far *TooFarError
		if !errors.As(err, &far) || far.Paused <= 0 {
			t.Fatalf("Wait during the pause: %v; want a TooFarError caused by the pause", err)
		}
	})
}

// TestWaitCancelledGivesTheSlotBack: a waiter whose context ends returns
// its slot, so the next caller gets it.
func TestWaitCancelledGivesTheSlotBack(t *testing.T) {
	forEachRealTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		lim := Limit{Rate: 1, MaxWait: 5 * time.Second}
		ctx := context.Background()
		if _, err := th.Reserve(ctx, "api", lim, 1); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := th.Wait(cctx, "api", lim, 1)
			done <- err
		}()
		time.AfterFunc(50*ms, cancel)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: %v; want context.Canceled", err)
		}
		// The next slot is the one the waiter gave back: about 1s from
		// the first reservation, not 2s.
		r, err := th.Reserve(ctx, "api", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Delay > time.Second || r.Delay < 500*ms {
			t.Fatalf("next slot in %v; want the given-back slot, within 1s", r.Delay)
		}
	})
}
