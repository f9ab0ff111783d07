// Package pacestat holds the figures of the pacing benchmark
// (bench/cmd/pace) that the root module's internal/pacestat lacks: the
// steady part of a run as indices, the spread of the gaps pooled over
// several runs, and which calls a strict GCRA server refused; and a
// quantile of durations, which the queue benchmark uses too. The figures
// the root package has (MaxInWindow, GapCV, Count, Buckets) come from it.
//
// Every function takes arrival times sorted in increasing order, as
// downstreamtest.Server.Arrivals returns them.
package pacestat

import (
	"math"
	"slices"
	"time"

	rootstat "github.com/sluicehq/sluice/internal/pacestat"
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
	w.Lo = rootstat.Count(arr, arr[0], w.Start) // the arrivals before Start
	w.Hi = w.Lo + rootstat.Count(arr, w.Start, w.End)
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

// Refused replays a strict GCRA server over the arrivals, from an empty
// bucket: rate calls per second, and a call may come up to tolerance
// intervals before its theoretical arrival time. It reports which calls
// such a server refuses. This is the rule of downstreamtest.Server in its
// Strict mode, which decides each call at its recorded arrival, so the
// replay tells which of the recorded arrivals got 429.
func Refused(arr []time.Time, rate float64, tolerance int) []bool {
	out := make([]bool, len(arr))
	if rate <= 0 || len(arr) == 0 {
		return out
	}
	interval := time.Duration(float64(time.Second) / rate)
	slack := time.Duration(tolerance) * interval
	var tat time.Time
	for i, now := range arr {
		next := tat
		if next.Before(now) {
			next = now
		}
		if now.Before(next.Add(-slack)) {
			out[i] = true
			continue
		}
		tat = next.Add(interval)
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
