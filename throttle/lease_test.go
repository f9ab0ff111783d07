package throttle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAcquireWaitWokenByRelease: a lease given back is usable at once by a
// caller waiting in another process. The waiter never polls (its poll is
// an hour) and the leases run for an hour, so only the release's
// announcement can hand it the slot before its context ends.
func TestAcquireWaitWokenByRelease(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		prefix := redistest.KeyPrefix(t) + "th"
		a := newThrottle(t, client, nil, &Options{Prefix: prefix, Subscribe: true})
		b := newThrottle(t, client, nil, &Options{Prefix: prefix, Subscribe: true})
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
				_, err := b.AcquireWait(ctx, "api", c, time.Hour)
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

// TestAcquireWaitGivesUp: with every lease held for longer than the wait,
// AcquireWait returns the BusyError when its wait is over, and ctx's error
// when ctx ends first; a wait of zero asks once.
func TestAcquireWaitGivesUp(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		c := Concurrency{Max: 1, Lease: time.Hour}
		if _, err := th.Acquire(ctx, "api", c); err != nil {
			t.Fatal(err)
		}
		var busy *BusyError
		if _, err := th.AcquireWait(ctx, "api", c, 0); !errors.As(err, &busy) || busy.InUse != 1 {
			t.Fatalf("wait 0: %v; want busy", err)
		}
		if _, err := th.AcquireWait(ctx, "api", c, 50*ms); !errors.As(err, &busy) {
			t.Fatalf("wait 50ms: %v; want busy", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := th.AcquireWait(cctx, "api", c, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v; want context.Canceled", err)
		}
		if n := len(th.releases.waiting); n != 0 {
			t.Fatalf("%d keys still have callers in line after every wait ended", n)
		}
	})
}

// inLine returns how many callers of AcquireWait wait for a lease of key.
func (t *Throttle) inLine(key string) int {
	t.releases.mu.Lock()
	defer t.releases.mu.Unlock()
	return len(t.releases.waiting[key])
}

// TestReleaseWakesOwnWaiter: a subscribed process's release wakes its own
// waiter through the announcement it hears, with no poll to fall back on.
func TestReleaseWakesOwnWaiter(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		a := newThrottle(t, client, nil, &Options{Subscribe: true})
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
			_, err := a.AcquireWait(ctx, "api", c, time.Hour)
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
