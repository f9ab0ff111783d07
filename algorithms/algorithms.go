// Package algorithms admits or refuses calls by the classic rate-limiting
// algorithms: fixed window, sliding window log, sliding window counter,
// token bucket and GCRA (the leaky bucket as a meter).
//
// Every algorithm sits behind one interface, [Limiter], and answers with one
// result type, [Decision]. Each has two implementations that make the same
// decisions:
//
//   - [NewRedis]: shared by every process that talks to the same Redis. Each
//     call is one atomic Lua script, one round trip, decided on the Redis
//     server's clock, so that hosts whose clocks disagree still agree on the
//     limit. Keys carry one Redis Cluster hash tag per limited key and always
//     have a TTL.
//   - [NewLocal]: in process, with an injectable clock. It is the reference
//     model that the Redis scripts are checked against, a local fallback,
//     and what the embedded default runs on.
//
// Time is kept in whole microseconds (exact in a Lua double until the year
// 2255), and the bucket algorithms use exact rational arithmetic, so
// remaining counts, reset and retry-after times are exact, never truncated
// or rounded down. A refused call never consumes anything.
//
// docs/algorithms.md describes each algorithm's guarantees, error bound and
// memory, and when to pick it.
package algorithms

import (
	"context"
	"errors"
	"time"
)

// Algorithm names one of the five admission algorithms. The string values
// are the names used in policy files.
type Algorithm string

// The five algorithms.
const (
	// FixedWindow counts calls in consecutive windows aligned to the Unix
	// epoch. Cheapest; admits up to twice the limit across a window
	// boundary.
	FixedWindow Algorithm = "fixed_window"
	// SlidingWindowLog keeps one timestamp per admitted unit: exact over
	// every window, memory proportional to the limit.
	SlidingWindowLog Algorithm = "sliding_window_log"
	// SlidingWindowCounter weights the previous fixed window's count by
	// how much of it still overlaps the sliding window: constant memory,
	// approximate (see docs/algorithms.md for the bound).
	SlidingWindowCounter Algorithm = "sliding_window_counter"
	// TokenBucket refills Limit tokens per Period up to Burst; a call takes
	// its cost in tokens. Exact.
	TokenBucket Algorithm = "token_bucket"
	// GCRA is the generic cell rate algorithm: the leaky bucket as a
	// meter, kept as one theoretical arrival time. Same decisions as
	// TokenBucket, one number of state.
	GCRA Algorithm = "gcra"
)

// Algorithms lists every algorithm, in the order the documentation uses.
var Algorithms = []Algorithm{FixedWindow, SlidingWindowLog, SlidingWindowCounter, TokenBucket, GCRA}

// Decision is the outcome of one call to a [Limiter]. Every field is exact:
// durations are rounded up to the microsecond, never down, so a caller who
// waits RetryAfter is not early.
type Decision struct {
	// Allowed reports whether the call was admitted (by AllowN) or would be
	// admitted now (by PeekN).
	Allowed bool
	// Limit is the most units the key can admit at once: the policy's
	// Limit for the window algorithms, its Burst for the buckets.
	Limit int64
	// Remaining is how many more units the key would admit right now,
	// after this call.
	Remaining int64
	// ResetAfter is how long until the key is back to full capacity if no
	// further call is made. Zero when it is full already.
	ResetAfter time.Duration
	// RetryAfter is zero when Allowed. Otherwise it is how long until the
	// same cost would be admitted, if nothing else consumes in between.
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
	// Reset forgets everything about key: its next call sees a full
	// capacity.
	Reset(ctx context.Context, key string) error
	// Policy returns the policy the limiter enforces.
	Policy() Policy
}

// Errors returned by the package. Errors that carry details wrap these; test
// with errors.Is.
var (
	// ErrInvalidPolicy is wrapped by every Policy.Validate error.
	ErrInvalidPolicy = errors.New("sluice: invalid policy")
	// ErrInvalidCost: a cost below 1.
	ErrInvalidCost = errors.New("sluice: cost must be at least 1")
	// ErrCostExceedsCapacity: a cost that the policy could never admit,
	// however long the caller waited.
	ErrCostExceedsCapacity = errors.New("sluice: cost exceeds the policy's capacity")
	// ErrInvalidKey: an empty key.
	ErrInvalidKey = errors.New("sluice: key must not be empty")
)

var (
	_ Limiter = (*Local)(nil)
	_ Limiter = (*Redis)(nil)
)
