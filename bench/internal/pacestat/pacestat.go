// Package pacestat holds the figures of the pacing benchmark
// (bench/cmd/pace): the spread of the gaps between arrivals, counts in an
// interval or in buckets for a plot, the steady part of a run, and which
// calls the downstream refused; and a quantile of durations, which the
// queue benchmark uses too. The busiest window is
// downstreamtest.MaxInWindow.
//
// Every function takes arrival times sorted in increasing order, as
// downstreamtest.Server.Arrivals returns them. Times are compared with
// time.Time.Sub, so time.Now's readings are measured on the monotonic
// clock.
package pacestat

import (
	"context"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice/algorithms"
)

// Window is the steady part of a run: the arrivals in [Start, End), at
// indices [Lo, Hi) of the full slice.
type Window struct {
	Start, End time.Time
	Lo, Hi     int
}

// Len is the window's length.
func (w Window) Len() time.Duration { return w.End.Sub(w.Start) }

// Count is the number of arrivals in the window.
func (w Window) Count() int { return w.Hi - w.Lo }

// Steady drops trim from each end of the arrivals: the window starts trim
// after the first arrival and ends trim before the last. ok is false when
// nothing is left.
func Steady(arr []time.Time, trim time.Duration) (w Window, ok bool) {
	if len(arr) < 2 {
		return Window{}, false
	}
	w.Start = arr[0].Add(trim)
	w.End = arr[len(arr)-1].Add(-trim)
	if !w.End.After(w.Start) {
		return Window{}, false
	}
	w.Lo = Count(arr, arr[0], w.Start) // the arrivals before Start
	w.Hi = w.Lo + Count(arr, w.Start, w.End)
	return w, true
}

// Gaps accumulates the gaps between consecutive arrivals of one or more
// runs, so that the coefficient of variation can be pooled over runs
// without counting the pause between two of them as a gap.
type Gaps struct {
	N          int
	Sum, SumSq float64 // of the gaps in ns, and of their squares
}

// Add adds the gaps of one run's arrivals.
func (g *Gaps) Add(arr []time.Time) {
	for i := 1; i < len(arr); i++ {
		d := float64(arr[i].Sub(arr[i-1]))
		g.N++
		g.Sum += d
		g.SumSq += d * d
	}
}

// CV is the pooled coefficient of variation of the gaps: for one run, the
// root package's GapCV. It is NaN when there is no gap, or when every gap
// is 0.
func (g Gaps) CV() float64 {
	if g.N < 1 || g.Sum <= 0 {
		return math.NaN()
	}
	n := float64(g.N)
	mean := g.Sum / n
	variance := max(0, g.SumSq/n-mean*mean)
	return math.Sqrt(variance) / mean
}

// Refused replays downstreamtest.Server's quota over the arrivals it
// recorded, from rest: the same algorithms.GCRA (rate calls per second, a
// burst of tolerance+1), decided at the same microseconds. It reports
// which calls the server refused. tolerance is the one the server applied
// (Config.Tolerance, unless that was 0: then the server's default).
func Refused(arr []time.Time, rate, tolerance int) []bool {
	out := make([]bool, len(arr))
	if rate <= 0 || len(arr) == 0 {
		return out
	}
	var now time.Time
	p := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: int64(rate), Period: time.Second, Burst: int64(max(tolerance, 0)) + 1}
	l, err := algorithms.NewLocal(p, &algorithms.LocalOptions{Clock: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	for i, t := range arr {
		now = time.UnixMicro(t.Sub(arr[0]).Microseconds())
		d, _ := l.AllowN(context.Background(), "quota", 1)
		out[i] = !d.Allowed
	}
	return out
}

// CountTrue counts the true values of b[lo:hi].
func CountTrue(b []bool, lo, hi int) int {
	n := 0
	for _, v := range b[lo:hi] {
		if v {
			n++
		}
	}
	return n
}

// Quantile is the q-quantile (0 ≤ q ≤ 1) of d by the nearest rank; d is
// sorted in place. Zero for no values.
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
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
