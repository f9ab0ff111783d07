package algorithms

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/ratio"
)

// Policy says how much a key may admit: at most Limit units per Period for
// the window algorithms; for the buckets (TokenBucket, GCRA), Limit/Period
// is the sustained rate and Burst how many units may pass at once after an
// idle spell. The zero value is not valid; NewLocal and NewRedis Validate.
type Policy struct {
	// Algorithm chooses the algorithm. Required.
	Algorithm Algorithm
	// Limit is the number of units admitted per Period. At least 1.
	Limit int64
	// Period is the window length, or the time the buckets take to refill
	// Limit units. From 1ms to 366 days, in whole microseconds.
	Period time.Duration
	// Burst is the capacity of TokenBucket and GCRA; zero means Limit. The
	// window algorithms have no burst: leave it zero.
	Burst int64
}

// Limits on policies, so that every quantity the scripts compute stays an
// exact integer in a Lua double.
const (
	// MinPeriod and MaxPeriod bound Period.
	MinPeriod = time.Millisecond
	MaxPeriod = 366 * 24 * time.Hour
	// MaxLimit is the largest Limit or Burst accepted.
	MaxLimit = int64(1) << 40
	// MaxLogLimit is the largest Limit accepted for SlidingWindowLog.
	MaxLogLimit = 100_000
	// exactBound bounds every scaled quantity of the bucket algorithms.
	exactBound = int64(1) << 52
)

// Capacity is the largest cost one call can have: Burst (or Limit when
// Burst is zero) for the buckets, Limit for the window algorithms.
func (p Policy) Capacity() int64 {
	if (p.Algorithm == TokenBucket || p.Algorithm == GCRA) && p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// String describes the policy in the form used in logs.
func (p Policy) String() string {
	s := fmt.Sprintf("%s %d/%s", p.Algorithm, p.Limit, p.Period)
	if p.Burst > 0 {
		s += fmt.Sprintf(" burst %d", p.Burst)
	}
	return s
}

// FieldError says which field of a Policy is wrong and why. It unwraps to
// ErrInvalidPolicy.
type FieldError struct {
	// Field is the field at fault, in lower case: "algorithm", "limit",
	// "period" or "burst".
	Field string
	// Msg says what is wrong, such as "must be at least 1, got 0".
	Msg string
}

// Error returns "sluice: invalid policy: field: message".
func (e *FieldError) Error() string {
	return ErrInvalidPolicy.Error() + ": " + e.Field + ": " + e.Msg
}

// Unwrap returns ErrInvalidPolicy.
func (e *FieldError) Unwrap() error { return ErrInvalidPolicy }

func policyErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate reports the first thing wrong with p as a *FieldError, which
// wraps ErrInvalidPolicy.
func (p Policy) Validate() error {
	_, err := compile(p)
	return err
}

// params is a validated policy in the integer units the algorithms use.
type params struct {
	alg      Algorithm
	limit    int64
	period   int64 // µs
	capacity int64 // Burst or Limit
	// The rate in lowest terms, rl units per pr µs. The buckets count in
	// 1/pr of a unit, so that one µs refills exactly rl of them.
	rl, pr int64
}

func compile(p Policy) (params, error) {
	bucket := p.Algorithm == TokenBucket || p.Algorithm == GCRA
	switch {
	case p.Algorithm == "":
		return params{}, policyErr("algorithm", "missing; one of %v", Algorithms)
	case !slices.Contains(Algorithms, p.Algorithm):
		return params{}, policyErr("algorithm", "unknown algorithm %q; one of %v", p.Algorithm, Algorithms)
	case p.Limit < 1:
		return params{}, policyErr("limit", "must be at least 1, got %d", p.Limit)
	case p.Limit > MaxLimit:
		return params{}, policyErr("limit", "must be at most %d, got %d", MaxLimit, p.Limit)
	case p.Algorithm == SlidingWindowLog && p.Limit > MaxLogLimit:
		return params{}, policyErr("limit", "%s stores one entry per unit and allows at most %d, got %d; use %s or %s for larger limits",
			p.Algorithm, MaxLogLimit, p.Limit, SlidingWindowCounter, GCRA)
	case p.Period < MinPeriod || p.Period > MaxPeriod:
		return params{}, policyErr("period", "must be between %s and %s, got %s", MinPeriod, MaxPeriod, p.Period)
	case p.Period%time.Microsecond != 0:
		return params{}, policyErr("period", "must be a whole number of microseconds, got %s", p.Period)
	case p.Burst < 0:
		return params{}, policyErr("burst", "must not be negative, got %d", p.Burst)
	case !bucket && p.Burst != 0:
		return params{}, policyErr("burst", "%s has no burst; leave it 0 (the window admits Limit)", p.Algorithm)
	case p.Burst > MaxLimit:
		return params{}, policyErr("burst", "must be at most %d, got %d", MaxLimit, p.Burst)
	}
	c := params{
		alg:      p.Algorithm,
		limit:    p.Limit,
		period:   int64(p.Period / time.Microsecond),
		capacity: p.Capacity(),
	}
	c.rl, c.pr = ratio.Reduce(c.limit, c.period)
	if bucket && c.capacity > exactBound/c.pr {
		return params{}, policyErr("burst", "%d units at %d per %s is too fine-grained to count exactly; use a smaller burst or a coarser period", c.capacity, p.Limit, p.Period)
	}
	return c, nil
}

// check validates one call's key and cost against the policy.
func (c *params) check(key string, n int64) error {
	switch {
	case key == "":
		return ErrInvalidKey
	case n < 1:
		return fmt.Errorf("%w, got %d", ErrInvalidCost, n)
	case n > c.capacity:
		return fmt.Errorf("%w: cost %d, capacity %d (%s)", ErrCostExceedsCapacity, n, c.capacity, c.alg)
	}
	return nil
}

// ScriptArgs returns the policy's constant arguments to the admission
// scripts (limit, period in µs, capacity, the rate in lowest terms), for
// packages of this module that run admission inside a larger script. It
// fails as Validate does.
func (p Policy) ScriptArgs() ([5]string, error) {
	c, err := compile(p)
	if err != nil {
		return [5]string{}, err
	}
	var a [5]string
	for i, v := range []int64{c.limit, c.period, c.capacity, c.rl, c.pr} {
		a[i] = strconv.FormatInt(v, 10)
	}
	return a, nil
}
