package algorithms_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/algorithms"
)

// A fixed window of 3 calls per minute, in process, on a clock the example
// moves by hand.
func ExampleNewLocal() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lim, err := algorithms.NewLocal(algorithms.Policy{
		Algorithm: algorithms.FixedWindow, Limit: 3, Period: time.Minute,
	}, &algorithms.LocalOptions{Clock: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, _ := lim.AllowN(ctx, "acme", 1)
		fmt.Printf("allowed %v, remaining %d, retry after %v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	now = now.Add(time.Minute)
	d, _ := lim.AllowN(ctx, "acme", 1)
	fmt.Printf("a minute later: allowed %v, remaining %d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed true, remaining 2, retry after 0s
	// allowed true, remaining 1, retry after 0s
	// allowed true, remaining 0, retry after 0s
	// allowed false, remaining 0, retry after 1m0s
	// a minute later: allowed true, remaining 2
}

// GCRA shared through Redis: 10 calls per second with bursts of 5. Every
// process that uses the same Redis shares the limit of each key.
func ExampleNewRedis() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	lim, err := algorithms.NewRedis(rdb, algorithms.Policy{
		Algorithm: algorithms.GCRA, Limit: 10, Period: time.Second, Burst: 5,
	}, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	d, err := lim.AllowN(ctx, "tenant:{acme}", 5) // braces and colons are fine
	if err != nil {
		panic(err)
	}
	fmt.Println("5 at once:", d.Allowed, "remaining", d.Remaining)
	d, _ = lim.AllowN(ctx, "tenant:{acme}", 1)
	fmt.Println("one more:", d.Allowed, "retry within 100ms:", d.RetryAfter > 0 && d.RetryAfter <= 100*time.Millisecond)
	d, _ = lim.AllowN(ctx, "tenant:{other}", 1)
	fmt.Println("another tenant:", d.Allowed)
	// Output:
	// 5 at once: true remaining 0
	// one more: false retry within 100ms: true
	// another tenant: true
}

// A policy that could never admit is refused when the limiter is built,
// naming the field.
func ExamplePolicy_Validate() {
	err := algorithms.Policy{Algorithm: algorithms.TokenBucket, Limit: 0, Period: time.Second}.Validate()
	fmt.Println(err)
	var fe *algorithms.FieldError
	if errors.As(err, &fe) {
		fmt.Printf("field %s: %s\n", fe.Field, fe.Msg)
	}
	fmt.Println(errors.Is(err, algorithms.ErrInvalidPolicy))
	// Output:
	// sluice: invalid policy: limit: must be at least 1, got 0
	// field limit: must be at least 1, got 0
	// true
}
