// Package pacestat measures how evenly calls arrived: the figures that
// tests and benchmarks use to check pacing against a quota.
//
// Every function takes the arrival times as a []time.Time sorted in
// ascending order, the form that downstreamtest.Server.Arrivals returns.
// Times are compared with time.Time.Sub, so readings that carry Go's
// monotonic clock (time.Now's) are measured on it and are immune to wall
// clock steps. An unsorted slice gives unspecified results; sort it first
// (slices.SortFunc(a, time.Time.Compare)).
//
// All functions are pure: they never modify or retain their input, apart
// from Trim, which returns a subslice of it.
package pacestat

import (
	"math"
	"sort"
	"time"
)

// MaxInWindow returns the largest number of arrivals that fit in one
// half-open window [t, t+window) of the given length, over every position
// t. An arrival exactly window after another falls outside the window that
// starts at the first: two arrivals exactly one second apart never share a
// one-second window.
//
// This is the figure that a quota of n calls per window bounds: a
// downstream that allows n calls per second has been respected when
// MaxInWindow(arrivals, time.Second) <= n. A window that is not positive
// holds no arrival, so the result is 0. It runs in O(len(arrivals)).
func MaxInWindow(arrivals []time.Time, window time.Duration) int {
	if window <= 0 {
		return 0
	}
	best := 0
	lo := 0
	for hi, t := range arrivals {
		// The busiest windows can always be taken to end just after an
		// arrival; drop from the front whatever is window or more before it.
		for t.Sub(arrivals[lo]) >= window {
			lo++
		}
		if n := hi - lo + 1; n > best {
			best = n
		}
	}
	return best
}

// GapCV returns the coefficient of variation of the gaps between
// consecutive arrivals: the population standard deviation of the gaps
// divided by their mean. Perfectly even pacing gives 0; Poisson arrivals
// give about 1; bursts separated by pauses give more.
//
// The result is NaN when it is undefined: with fewer than two arrivals
// (there is no gap) and when every arrival happened at the same instant
// (the mean gap is 0). NaN compares false with everything, so a check such
// as GapCV(a) < 0.1 fails for those inputs instead of passing vacuously.
func GapCV(arrivals []time.Time) float64 {
	n := len(arrivals) - 1 // the number of gaps
	if n < 1 {
		return math.NaN()
	}
	span := arrivals[n].Sub(arrivals[0])
	if span <= 0 {
		return math.NaN()
	}
	// Two passes in float64 nanoseconds: the mean is exact enough from
	// the span, and the deviations are small numbers summed once.
	mean := float64(span) / float64(n)
	var sum float64
	for i := 1; i <= n; i++ {
		d := float64(arrivals[i].Sub(arrivals[i-1])) - mean
		sum += d * d
	}
	return math.Sqrt(sum/float64(n)) / mean
}

// Count returns the number of arrivals within the half-open interval
// [from, to); 0 when to is not after from. It runs in O(log n).
func Count(arrivals []time.Time, from, to time.Time) int {
	if !to.After(from) {
		return 0
	}
	return firstAtOrAfter(arrivals, to) - firstAtOrAfter(arrivals, from)
}

// Rate returns the arrivals per second within the half-open interval
// [from, to): Count(arrivals, from, to) divided by the interval's length in
// seconds. It is 0 when to is not after from.
func Rate(arrivals []time.Time, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	return float64(Count(arrivals, from, to)) / to.Sub(from).Seconds()
}

// Trim drops the arrivals in the first head and the last tail of the span
// from the first arrival to the last, so that steady-state figures leave
// out the ramp-up and the drain (Trim(a, time.Second, time.Second) for the
// usual "drop the first and last second"). What remains are the arrivals
// at or after first+head and at or before last-tail: an arrival exactly
// head after the first is kept, as is one exactly tail before the last.
// A negative head or tail counts as 0, so Trim(a, 0, 0) returns a whole.
//
// The result is a subslice of arrivals, sharing its backing array; it is
// empty (never nil unless arrivals is nil) when head and tail together
// cover the span.
func Trim(arrivals []time.Time, head, tail time.Duration) []time.Time {
	if len(arrivals) == 0 {
		return arrivals
	}
	head, tail = max(head, 0), max(tail, 0)
	first, last := arrivals[0], arrivals[len(arrivals)-1]
	lo := firstAtOrAfter(arrivals, first.Add(head))
	// The first arrival strictly after last-tail ends what is kept.
	cut := last.Add(-tail)
	hi := sort.Search(len(arrivals), func(i int) bool { return arrivals[i].Sub(cut) > 0 })
	if hi < lo {
		hi = lo
	}
	return arrivals[lo:hi]
}

// Buckets counts the arrivals in consecutive half-open buckets of the
// given width, the k-th covering [start+k*width, start+(k+1)*width): the
// data of a "calls per 100 ms" plot is Buckets(a, start, 100*time.Millisecond).
// The buckets run from start to the one that holds the last arrival, so
// empty buckets in the middle are present and a trailing empty one is not.
// Arrivals before start are left out. The result is nil when there is no
// arrival at or after start, or when width is not positive. It holds one
// int per bucket, so keep width sensible against the span.
func Buckets(arrivals []time.Time, start time.Time, width time.Duration) []int {
	if width <= 0 {
		return nil
	}
	i := firstAtOrAfter(arrivals, start)
	if i == len(arrivals) {
		return nil
	}
	counts := make([]int, arrivals[len(arrivals)-1].Sub(start)/width+1)
	for _, t := range arrivals[i:] {
		counts[t.Sub(start)/width]++
	}
	return counts
}

// firstAtOrAfter returns the index of the first arrival at or after t,
// len(arrivals) when there is none.
func firstAtOrAfter(arrivals []time.Time, t time.Time) int {
	return sort.Search(len(arrivals), func(i int) bool { return arrivals[i].Sub(t) >= 0 })
}
