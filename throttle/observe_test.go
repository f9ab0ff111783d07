package throttle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
)

// TestObserveSteps: a bucket follows the level the API reports. At 10/s
// with a burst of 10 (100 ms an interval), an empty bucket told "4 left"
// holds 4: a call of 4 is due now, one of 5 waits an interval; told more
// than it holds, it is left alone; the rest refills at the bucket's rate.
func TestObserveSteps(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{}
		clock.Set(0)
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		lim := Limit{Rate: 10, Burst: 10}
		observe := func(left int64, want int) {
			t.Helper()
			n, err := th.Observe(ctx, "api", lim, Level{Left: left})
			if err != nil || n != want {
				t.Fatalf("Observe(left %d) at %v = %d, %v; want %d moved", left, clock.Now().Sub(base), n, err, want)
			}
		}
		peek := func(n int64, want time.Duration) {
			t.Helper()
			r, err := th.Peek(ctx, "api", lim, n)
			if err != nil || !r.OK || !within(r.Delay, want) {
				t.Fatalf("Peek(%d) at %v = %v, %v; want a slot in %v", n, clock.Now().Sub(base), r, err, want)
			}
		}
		peek(10, 0)
		observe(10, 0) // as much as the bucket holds: nothing to move, no call
		observe(4, 1)
		peek(4, 0)
		peek(5, 100*time.Millisecond)
		observe(6, 0)  // more than it holds: the throttle's own count stands
		observe(-3, 1) // read as 0
		peek(1, 100*time.Millisecond)
		observe(0, 0)
		clock.Set(300 * time.Millisecond)
		peek(3, 0) // refilled at the bucket's own rate
		peek(4, 100*time.Millisecond)
		observe(0, 1)
		peek(1, 100*time.Millisecond)
	})
}

// within reports whether a delay is want, give or take the guard that a
// bucket of burst > 1 adds to a call that must wait for room (at most
// 250 ms; none when due now).
func within(d, want time.Duration) bool {
	if want == 0 {
		return d == 0
	}
	return d >= want && d <= want+250*time.Millisecond
}

// TestObserveAlso: a Level names one bucket; the others keep their count.
func TestObserveAlso(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		clock := &fakeClock{}
		clock.Set(0)
		th := newThrottle(t, client, clock.Now, nil)
		ctx := context.Background()
		// 1,000 tokens a second, burst 1,000; 10 requests a second, burst 10.
		lim := Limit{Rate: 1000, Burst: 1000, Also: []Rate{{Rate: 10, Burst: 10, Counts: CountsCalls}}}
		if n, err := th.Observe(ctx, "llm", lim, Level{Bucket: 1, Left: 0}); err != nil || n != 1 {
			t.Fatalf("Observe of the requests' bucket: %d, %v", n, err)
		}
		r, err := th.Peek(ctx, "llm", lim, 500)
		if err != nil || !within(r.Delay, 100*time.Millisecond) {
			t.Fatalf("a call of 500 tokens after 0 requests left: %v, %v; want 100ms, one request's interval", r, err)
		}
		if n, err := th.Observe(ctx, "llm", lim, Level{Bucket: 0, Left: 100}, Level{Bucket: 1, Left: 10}); err != nil || n != 1 {
			t.Fatalf("Observe of both: %d moved, %v; want the tokens' bucket alone", n, err)
		}
		r, err = th.Peek(ctx, "llm", lim, 500)
		if err != nil || !within(r.Delay, 400*time.Millisecond) {
			t.Fatalf("a call of 500 tokens with 100 left: %v, %v; want 400ms", r, err)
		}
		if _, err := th.Observe(ctx, "llm", lim, Level{Bucket: 2}); !errors.Is(err, algorithms.ErrInvalidPolicy) {
			t.Fatalf("Observe of a bucket the Limit lacks: %v", err)
		}
	})
}

// TestObserveKeepsTheKey: a bucket moved on a key nobody booked yet lives
// at least until its TAT, so the level is not forgotten before it refills.
func TestObserveKeepsTheKey(t *testing.T) {
	forEachTarget(t, func(t *testing.T, client redis.UniversalClient) {
		th := newThrottle(t, client, nil, nil)
		ctx := context.Background()
		lim := Limit{Rate: 1, Per: time.Minute, Burst: 40}
		if n, err := th.Observe(ctx, "shop", lim, Level{Left: 0}); err != nil || n != 1 {
			t.Fatalf("Observe: %d, %v", n, err)
		}
		k, _ := th.rateKey("shop")
		if ttl := client.PTTL(ctx, k).Val(); ttl < 40*time.Minute {
			t.Fatalf("the bucket lives %v; want at least the 40 minutes it takes to refill", ttl)
		}
		r, err := th.Peek(ctx, "shop", lim, 1)
		if err != nil || r.OK || r.RetryAfter < 49*time.Second {
			t.Fatalf("Peek after 0 left: %v, %v; want no slot for a minute, 50s beyond the 10s wait", r, err)
		}
	})
}
