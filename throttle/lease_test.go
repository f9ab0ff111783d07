package throttle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// fast is a Limit whose slots never keep a caller waiting long.
var fast = Limit{Rate: 1000, MaxWait: time.Hour}

// TestWaitAcquireWokenByRelease: a lease given back is usable at once by
// a caller waiting in another process. The waiter never polls (its poll
// is an hour) and the leases run for an hour, so only the release's
// announcement can hand it the slot before its context ends.
func TestWaitAcquireWokenByRelease(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t) + "th"
		a := newThrottle(t, client, nil, &Options{Prefix: prefix})
		b := newThrottle(t, client, nil, &Options{Prefix: prefix})
		b.leasePoll = time.Hour
		c := Concurrency{Max: 2, Lease: time.Hour}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var held []*Lease
		for range 2 {
			l, err := a.Acquire(ctx, "api", c)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		got := make(chan error, 2)
		for range 2 {
			go func() {
				_, _, err := b.WaitAcquire(ctx, "api", fast, 1, c)
				got <- err
			}()
		}
		// Once both waiters are in line, each release lets one through.
		for b.inLine("api") < 2 {
			if ctx.Err() != nil {
				t.Fatal("the waiters never joined the line")
			}
			time.Sleep(ms)
		}
		for i, l := range held {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiter %d after release %d: %v", i, i, err)
			}
		}
	})
}

// TestWaitAcquireGivesUp: with every lease held for longer than the
// wait, WaitAcquire returns the BusyError when its wait is over, and
// ctx's error when ctx ends first; a wait of none asks once. The slots
// it booked and could not use are given back.
func TestWaitAcquireGivesUp(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		c := Concurrency{Max: 1, Lease: time.Hour}
		if _, err := th.Acquire(ctx, "api", c); err != nil {
			t.Fatal(err)
		}
		var busy *BusyError
		if _, _, err := th.WaitAcquire(ctx, "api", Limit{Rate: 1000, MaxWait: NoWait}, 1, c); !errors.As(err, &busy) || busy.InUse != 1 {
			t.Fatalf("wait none: %v; want busy", err)
		}
		if _, _, err := th.WaitAcquire(ctx, "api", Limit{Rate: 1000, MaxWait: 50 * ms}, 1, c); !errors.As(err, &busy) {
			t.Fatalf("wait 50ms: %v; want busy", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 50*ms)
		defer cancel()
		if _, _, err := th.WaitAcquire(cctx, "api", fast, 1, c); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled: %v; want context.DeadlineExceeded", err)
		}
		if n := len(th.releases.waiting); n != 0 {
			t.Fatalf("%d keys still have callers in line after every wait ended", n)
		}
		// Every slot booked was given back: the next is due now.
		if r, err := th.Peek(ctx, "api", Limit{Rate: 1000, MaxWait: NoWait}, 1); err != nil || !r.OK || r.Delay != 0 {
			t.Fatalf("peek after the waits: %+v, %v; want a slot due now", r, err)
		}
	})
}

// inLine returns how many callers wait for a lease of key.
func (t *Throttle) inLine(key string) int {
	t.releases.mu.Lock()
	defer t.releases.mu.Unlock()
	return len(t.releases.waiting[key])
}

// TestReleaseWakesOwnWaiter: a subscribed process's release wakes its own
// waiter through the announcement it hears, with no poll to fall back on.
func TestReleaseWakesOwnWaiter(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		a := newThrottle(t, client, nil, nil)
		a.leasePoll = time.Hour
		c := Concurrency{Max: 1, Lease: time.Hour}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		held, err := a.Acquire(ctx, "api", c)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, _, err := a.WaitAcquire(ctx, "api", fast, 1, c)
			got <- err
		}()
		for a.inLine("api") < 1 {
			if ctx.Err() != nil {
				t.Fatal("the waiter never joined the line")
			}
			time.Sleep(ms)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter after its own process's release: %v", err)
		}
	})
}

// TestWatchReleases: a watch counts every release heard (from another
// process, through the announcement), those heard while its owner was
// busy included, and none after Stop.
func TestWatchReleases(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t) + "th"
		a := newThrottle(t, client, nil, &Options{Prefix: prefix})
		b := newThrottle(t, client, nil, &Options{Prefix: prefix})
		ctx := context.Background()
		c := Concurrency{Max: 2, Lease: time.Hour}
		var held []*Lease
		for range 2 {
			l, err := a.Acquire(ctx, "api", c)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}
		w := b.WatchReleases("api")
		if n := w.Take(); n != 0 {
			t.Fatalf("%d releases counted before any", n)
		}
		// Two releases, each of a full set (re-filled between them), with
		// nobody reading the watch between them.
		if err := held[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Acquire(ctx, "api", c); err != nil {
			t.Fatal(err)
		}
		if err := held[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		got := 0
		for deadline := time.After(20 * time.Second); got < 2; {
			select {
			case <-w.C:
				got += w.Take()
			case <-deadline:
				t.Fatalf("%d releases heard of 2", got)
			}
		}
		w.Stop()
		if len(b.releases.watchers) != 0 {
			t.Fatal("a stopped watch is still listed")
		}
	})
}

// TestKeepHoldsLeaseWhileCallRuns: a kept lease outlives many lease
// lengths: nobody else gets its slot, and its call's context stays
// live; once given back, the slot is usable at once.
func TestKeepHoldsLeaseWhileCallRuns(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		c := Concurrency{Name: "api", Max: 1, Lease: 150 * ms}
		l, err := th.Acquire(ctx, "api", c)
		if err != nil {
			t.Fatal(err)
		}
		call := l.Keep(ctx)
		for start := time.Now(); time.Since(start) < 6*c.Lease; time.Sleep(10 * ms) {
			if _, err := th.Acquire(ctx, "api", c); !errors.Is(err, ErrBusy) {
				t.Fatalf("after %v of a kept lease of %v: %v; want busy", time.Since(start).Round(ms), c.Lease, err)
			}
			if call.Err() != nil {
				t.Fatalf("the call's context ended: %v", context.Cause(call))
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if call.Err() == nil {
			t.Fatal("the call's context is live after Release")
		}
		if _, err := th.Acquire(ctx, "api", c); err != nil {
			t.Fatalf("after release: %v", err)
		}
		if n := testutil.ToFloat64(th.metrics.lost.WithLabelValues("api")); n != 0 {
			t.Fatalf("%v leases counted lost", n)
		}
	})
}

// TestKeepLosesLeaseEndsCall: a kept lease that is found gone (here its
// set deleted, as when it ran out and another took its slot) ends its
// call's context with a *LostError, and counts.
func TestKeepLosesLeaseEndsCall(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		c := Concurrency{Name: "api", Max: 1, Lease: 150 * ms}
		l, err := th.Acquire(ctx, "api", c)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		call := l.Keep(ctx)
		k, _ := th.key("conc", "api")
		if err := client.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-call.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the call's context is live after its lease was lost")
		}
		var lost *LostError
		if cause := context.Cause(call); !errors.As(cause, &lost) || lost.Key != "api" {
			t.Fatalf("cause %v; want a *LostError on key api", cause)
		}
		if n := testutil.ToFloat64(th.metrics.lost.WithLabelValues("api")); n != 1 {
			t.Fatalf("%v leases counted lost; want 1", n)
		}
	})
}

// TestKeepEndsCallWhenRedisIsGone: with Redis unreachable, a kept lease
// cannot be extended; its call ends (before the lease would run out)
// with a *LostError that wraps ErrUnavailable.
func TestKeepEndsCallWhenRedisIsGone(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialTimeout: 20 * ms, DialerRetries: 1})
	defer client.Close()
	th := newThrottle(t, client, nil, nil)
	ctx := context.Background()
	l, err := th.Acquire(ctx, "api", Concurrency{Max: 1, Lease: 300 * ms})
	if err != nil {
		t.Fatal(err)
	}
	call := l.Keep(ctx)
	m.Close()
	select {
	case <-call.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the call's context is live with Redis gone")
	}
	if cause := context.Cause(call); !errors.Is(cause, ErrLeaseLost) || !errors.Is(cause, ErrUnavailable) {
		t.Fatalf("cause %v; want ErrLeaseLost and ErrUnavailable", cause)
	}
	l.Release(ctx)
}
