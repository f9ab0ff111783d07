package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/throttle"
)

// exampleRedis starts an embedded Redis, its clock held still at now
// (the throttle decides on the Redis server's clock), and a client on it;
// stop closes both.
func exampleRedis(now time.Time) (m *miniredis.Miniredis, rdb *redis.Client, stop func()) {
	m = miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	m.SetTime(now)
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr()})
	return m, rdb, func() {
		rdb.Close()
		m.Close()
	}
}

// Ten calls a second, evenly spaced: each Reserve books the next slot of
// the key and says how long to sleep before calling. A slot further away
// than MaxWait is not booked; the caller learns when to come back. The
// decisions are taken on the Redis server's clock, which this example's
// embedded Redis holds still and moves by hand.
func ExampleThrottle_Reserve() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m, rdb, stop := exampleRedis(now)
	defer stop()
	th, err := throttle.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer th.Close()

	ctx := context.Background()
	lim := throttle.Limit{Name: "payments", Rate: 10, Per: time.Second, MaxWait: 250 * time.Millisecond}
	for range 4 {
		r, err := th.Reserve(ctx, "payments", lim, 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(r) // a real caller sleeps r.Delay, then calls
	}
	m.SetTime(now.Add(time.Second))
	r, _ := th.Reserve(ctx, "payments", lim, 1)
	fmt.Println("a second later:", r)
	// Output:
	// slot in 0s
	// slot in 100ms
	// slot in 200ms
	// no slot within the allowed wait; retry after 50ms
	// a second later: slot in 0s
}

// Wait books a slot and sleeps until it. With a Burst of 2 the first two
// calls go at once; the third would have to wait one interval (100ms),
// more than its MaxWait, so Wait returns a *TooFarError at once instead
// of sleeping.
func ExampleThrottle_Wait() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	_, rdb, stop := exampleRedis(now)
	defer stop()
	th, err := throttle.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer th.Close()

	ctx := context.Background()
	lim := throttle.Limit{Name: "crm", Rate: 10, Burst: 2, MaxWait: 20 * time.Millisecond}
	for i := range 3 {
		_, err := th.Wait(ctx, "crm:acme", lim, 1)
		var far *throttle.TooFarError
		switch {
		case err == nil:
			fmt.Printf("call %d: go\n", i+1)
		case errors.As(err, &far):
			fmt.Printf("call %d: too far, retry after %v\n", i+1, far.RetryAfter)
		default:
			panic(err) // throttle.ErrUnavailable when Redis is down
		}
	}
	// Output:
	// call 1: go
	// call 2: go
	// call 3: too far, retry after 80ms
}

// After a 429 with "Retry-After: 30", Pause stops every worker that shares
// the Redis from calling the key for 30 seconds. When the pause ends (on
// the Redis server's clock, which the example moves by hand), calls resume one interval apart
// rather than all at once, even with a Burst: Wait sleeps each caller
// until its slot, the first not at all. A call that has to wait for room,
// and the calls after the one that fills the bucket, keep its guard
// (Limit.Guard: 50ms here).
func ExampleThrottle_Pause() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	m, rdb, stop := exampleRedis(now)
	defer stop()
	th, err := throttle.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer th.Close()

	ctx := context.Background()
	lim := throttle.Limit{Name: "shop", Rate: 10, Burst: 5, MaxWait: time.Second, Guard: 50 * time.Millisecond}
	left, err := th.Pause(ctx, "shop:acme", lim, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("paused for", left)

	_, err = th.Wait(ctx, "shop:acme", lim, 1)
	var far *throttle.TooFarError
	if errors.As(err, &far) {
		fmt.Printf("during the pause: paused %v more, retry after %v\n", far.Paused, far.RetryAfter)
	}

	m.SetTime(now.Add(30 * time.Second))
	for range 3 {
		r, err := th.Wait(ctx, "shop:acme", lim, 1)
		if err != nil {
			panic(err)
		}
		fmt.Println("after the pause:", r) // a real caller calls now
	}
	// Output:
	// paused for 30s
	// during the pause: paused 30s more, retry after 29.05s
	// after the pause: slot in 0s
	// after the pause: slot in 150ms
	// after the pause: slot in 250ms
}
