package algorithms

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// event is one admitted call of a timeline.
type event struct {
	at int64 // µs from base
	n  int64
}

// randomPolicies returns policies of alg with awkward numbers: rates that
// do not divide a second, sub-second and long periods, bursts unlike the
// limit.
func randomPolicies(alg Algorithm, rng *rand.Rand, count int) []Policy {
	limits := []int64{1, 2, 3, 7, 10, 100, 999}
	periods := []time.Duration{ms, 7 * ms, 333 * ms, 500 * ms, time.Second, 3 * time.Second, time.Hour}
	var ps []Policy
	for len(ps) < count {
		p := Policy{Algorithm: alg, Limit: limits[rng.IntN(len(limits))], Period: periods[rng.IntN(len(periods))]}
		if (alg == TokenBucket || alg == GCRA) && rng.IntN(2) == 0 {
			p.Burst = 1 + rng.Int64N(2*p.Limit)
		}
		if p.Validate() == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// nextGap draws the time to the next call: bunched, at about the policy's
// pace, or idle for a period or more.
func nextGap(rng *rand.Rand, p Policy) int64 {
	period := int64(p.Period / time.Microsecond)
	pace := period / p.Limit
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return 1
	case 2, 3, 4:
		return rng.Int64N(pace + 1)
	case 5, 6, 7:
		return rng.Int64N(2*pace + 2)
	case 8:
		return rng.Int64N(period + 1)
	default:
		return rng.Int64N(3 * period)
	}
}

// timeline runs count random calls against a fresh Local limiter for p and
// checks, after every call, that Remaining, RetryAfter and ResetAfter are
// exact (see checkDecision). It returns the admitted calls.
func timeline(t *testing.T, p Policy, rng *rand.Rand, count int) []event {
	t.Helper()
	clock := newClock()
	l, err := NewLocal(p, &LocalOptions{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var at int64
	var admitted []event
	for i := 0; i < count; i++ {
		at += nextGap(rng, p)
		now := base.Add(time.Duration(at) * us)
		clock.Set(now)
		n := 1 + rng.Int64N(p.Capacity())
		if rng.IntN(3) > 0 {
			n = 1
		}
		d, err := l.AllowN(ctx, "k", n)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted = append(admitted, event{at, n})
		}
		checkDecision(t, l, clock, now, n, d)
		clock.Set(now)
	}
	return admitted
}

// checkDecision probes l with peeks (which change nothing) to verify that
// d, decided at now for cost n, is exact:
//   - Remaining units are admitted now, and one more is not;
//   - after a denial, the same cost is admitted at RetryAfter and not a
//     microsecond earlier;
//   - at ResetAfter the full capacity is back, and not a microsecond
//     earlier.
func checkDecision(t *testing.T, l Limiter, clock *fakeClock, now time.Time, n int64, d Decision) {
	t.Helper()
	ctx := context.Background()
	peek := func(at time.Time, k int64) Decision {
		t.Helper()
		clock.Set(at)
		pd, err := l.PeekN(ctx, "k", k)
		if err != nil {
			t.Fatal(err)
		}
		return pd
	}
	c := l.Policy().Capacity()
	where := fmt.Sprintf("%s, at %v after cost %d got %+v", l.Policy(), now.Sub(base), n, d)
	if d.Remaining < 0 || d.Remaining > c {
		t.Fatalf("%s: remaining out of range", where)
	}
	if d.Remaining > 0 && !peek(now, d.Remaining).Allowed {
		t.Fatalf("%s: the remaining %d are not admitted", where, d.Remaining)
	}
	if d.Remaining < c && peek(now, d.Remaining+1).Allowed {
		t.Fatalf("%s: %d are admitted, more than the remaining", where, d.Remaining+1)
	}
	if d.Allowed != (d.RetryAfter == 0) {
		t.Fatalf("%s: retry-after must be set exactly when denied", where)
	}
	// The probes run in time order: a limiter may forget a key once its
	// state has expired.
	if !d.Allowed {
		if d.RetryAfter > us && peek(now.Add(d.RetryAfter-us), n).Allowed {
			t.Fatalf("%s: admitted a microsecond before retry-after", where)
		}
		if !peek(now.Add(d.RetryAfter), n).Allowed {
			t.Fatalf("%s: not admitted at retry-after", where)
		}
	}
	if d.ResetAfter > 0 {
		if pd := peek(now.Add(d.ResetAfter-us), c); pd.Remaining == c {
			t.Fatalf("%s: full a microsecond before reset-after: %+v", where, pd)
		}
	}
	if pd := peek(now.Add(d.ResetAfter), c); !pd.Allowed || pd.Remaining != c {
		t.Fatalf("%s: not full at reset-after: %+v", where, pd)
	}
}

// maxInWindow returns the most units admitted in any half-open window
// [t, t+width) of the timeline.
func maxInWindow(ev []event, width int64) int64 {
	var most, sum int64
	j := 0
	for i := range ev {
		sum += ev[i].n
		for ev[j].at <= ev[i].at-width {
			sum -= ev[j].n
			j++
		}
		most = max(most, sum)
	}
	return most
}

// maxInAligned returns the most units admitted in one epoch-aligned window.
func maxInAligned(ev []event, width int64) int64 {
	start := base.UnixMicro()
	sums := map[int64]int64{}
	var most int64
	for _, e := range ev {
		w := floorDiv(start+e.at, width)
		sums[w] += e.n
		most = max(most, sums[w])
	}
	return most
}

const timelines, callsPerTimeline = 40, 600

func TestPropertySlidingLogExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range randomPolicies(SlidingWindowLog, rng, timelines) {
		ev := timeline(t, p, rng, callsPerTimeline)
		if got := maxInWindow(ev, int64(p.Period/us)); got > p.Limit {
			t.Fatalf("%s admitted %d in one window", p, got)
		}
	}
}

// TestPropertyBucketsExact checks the arrival curve of TokenBucket and
// GCRA: over any span from one admitted call to a later one, they admit at
// most Burst + rate*span units.
func TestPropertyBucketsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		for _, p := range randomPolicies(alg, rng, timelines) {
			ev := timeline(t, p, rng, callsPerTimeline)
			period := int64(p.Period / us)
			for i := range ev {
				var sum int64
				for j := i; j < len(ev); j++ {
					sum += ev[j].n
					// sum <= Burst + (span * Limit / Period), in integers.
					if sum*period > p.Capacity()*period+(ev[j].at-ev[i].at)*p.Limit {
						t.Fatalf("%s admitted %d units over %dµs", p, sum, ev[j].at-ev[i].at)
					}
				}
			}
		}
	}
}

func TestPropertyFixedWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, p := range randomPolicies(FixedWindow, rng, timelines) {
		ev := timeline(t, p, rng, callsPerTimeline)
		width := int64(p.Period / us)
		if got := maxInAligned(ev, width); got > p.Limit {
			t.Fatalf("%s admitted %d in one aligned window", p, got)
		}
		// The documented weakness: up to twice the limit across a
		// boundary, never more.
		if got := maxInWindow(ev, width); got > 2*p.Limit {
			t.Fatalf("%s admitted %d in one sliding window", p, got)
		}
	}
}

// TestPropertySlidingCounterBound checks the documented error of the
// sliding window counter: at most Limit in any aligned window, and fewer
// than 2*Limit in any window of one period.
func TestPropertySlidingCounterBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, p := range randomPolicies(SlidingWindowCounter, rng, timelines) {
		ev := timeline(t, p, rng, callsPerTimeline)
		width := int64(p.Period / us)
		if got := maxInAligned(ev, width); got > p.Limit {
			t.Fatalf("%s admitted %d in one aligned window", p, got)
		}
		if got := maxInWindow(ev, width); got >= 2*p.Limit && p.Limit > 1 {
			t.Fatalf("%s admitted %d in one sliding window", p, got)
		}
	}
}
