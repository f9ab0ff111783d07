// Package algorithms admits or refuses calls by the classic rate-limiting
// algorithms: fixed window, sliding window log, sliding window counter,
// token bucket and GCRA. Every algorithm sits behind [Limiter] and answers
// with a [Decision], in two implementations that make the same decisions:
// [NewRedis], shared through Redis and decided on its server's clock by one
// Lua script a call, and [NewLocal], in process with an injectable clock
// (the reference model the scripts are checked against).
//
// Decisions are exact: time is kept in whole microseconds, the buckets count
// in exact rationals, and waits are rounded up. A refused call consumes
// nothing. docs/algorithms.md describes each algorithm and when to pick it.
package algorithms

import (
	"context"
	"errors"
	"time"
)

// Algorithm names one of the five admission algorithms. The string values
// are the names used in policy files.
type Algorithm string

// The five algorithms; docs/algorithms.md compares them.
const (
	// FixedWindow counts calls in consecutive windows aligned to the Unix
	// epoch; it admits up to twice the limit across a window boundary.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindowLog keeps one timestamp per admitted unit: exact.
	SlidingWindowLog Algorithm = "sliding_window_log"
	// SlidingWindowCounter weights the previous window's count by its
	// overlap with the sliding window: constant memory, approximate.
	SlidingWindowCounter Algorithm = "sliding_window_counter"
	// TokenBucket refills Limit tokens per Period up to Burst.
	TokenBucket Algorithm = "token_bucket"
	// GCRA (the leaky bucket as a meter) decides as TokenBucket does,
	// with one number of state.
	GCRA Algorithm = "gcra"
)

// Algorithms lists every algorithm, in the order the documentation uses.
var Algorithms = []Algorithm{FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, GCRA}

// impls holds each algorithm's reference model (model.go) and the short
// name of its Redis keys; its Lua script is scripts.Admit[name].
var impls = map[Algorithm]struct {
	eval func(c *params, state any, now, n int64, consume bool) step
	kind string
}{
	FixedWindow:          {(*params).fixedWindow, "fw"},
	SlidingWindowLog:     {(*params).slidingLog, "swl"},
	SlidingWindowCounter: {(*params).slidingCounter, "swc"},
	TokenBucket:          {(*params).tokenBucket, "tb"},
	GCRA:                 {(*params).gcra, "gcra"},
}

// Decision is the outcome of one call to a [Limiter]. Durations are rounded
// up to the microsecond, so a caller who waits RetryAfter is not early.
type Decision struct {
	// Allowed reports whether the call was admitted (by AllowN) or would be
	// admitted now (by PeekN).
	Allowed bool
	// Limit is the most units the key can admit at once: the policy's
	// Limit for the window algorithms, its Burst for the buckets.
	Limit int64
	// Remaining is how many more units the key would admit now.
	Remaining int64
	// ResetAfter is how long until the key is back to full capacity if no
	// further call is made. Zero when it is full already.
	ResetAfter time.Duration
	// RetryAfter, when not Allowed, is how long until the same cost would
	// be admitted if nothing else consumes in between.
	RetryAfter time.Duration
}

// Limiter admits units of cost for keys by one Policy. Implementations are
// safe for concurrent use.
type Limiter interface {
	// AllowN admits n units for key now, or refuses them without
	// consuming anything. n must be between 1 and the policy's capacity
	// (Limit, or Burst for the buckets); other values return an error
	// wrapping ErrInvalidCost or ErrCostExceedsCapacity and change nothing.
	AllowN(ctx context.Context, key string, n int64) (Decision, error)
	// PeekN reports what AllowN would decide now, without consuming.
	PeekN(ctx context.Context, key string, n int64) (Decision, error)
	// Reset forgets key: its next call sees a full capacity.
	Reset(ctx context.Context, key string) error
	// Policy returns the policy the limiter enforces.
	Policy() Policy
}

// Errors returned by the package, wrapped when they carry details.
var (
	// ErrInvalidPolicy is wrapped by every Policy.Validate error.
	ErrInvalidPolicy = errors.New("sluice: invalid policy")
	// ErrInvalidCost: a cost below 1.
	ErrInvalidCost = errors.New("sluice: cost must be at least 1")
	// ErrCostExceedsCapacity: a cost above the policy's capacity.
	ErrCostExceedsCapacity = errors.New("sluice: cost exceeds the policy's capacity")
	// ErrInvalidKey: an empty key.
	ErrInvalidKey = errors.New("sluice: key must not be empty")
)

var (
	_ Limiter = (*Local)(nil)
	_ Limiter = (*Redis)(nil)
)
