package admission

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Load says how to drive one target.
type Load struct {
	// Concurrency is the number of callers, each calling in a loop.
	// At least 1.
	Concurrency int
	// Calls, when positive, is the total number of calls, shared among
	// the callers. Otherwise the callers run for Duration.
	Calls int64
	// Duration bounds a run when Calls is 0.
	Duration time.Duration
	// IDs are the keys; each call picks one uniformly at random.
	IDs []string
	// Seed makes the key sequence repeatable: each caller draws from its
	// own generator seeded by Seed and its index.
	Seed uint64
}

// Result is what one or more runs measured.
type Result struct {
	Calls    int64
	Admitted int64
	Errors   int64
	// FirstErr is the first error seen, if any.
	FirstErr error
	// Elapsed is the wall time from the first caller's start to the last
	// caller's end, summed over merged runs.
	Elapsed time.Duration
	// latencies of every successful call, in nanoseconds, sorted.
	latencies []int64
}

// PerSecond is the number of decisions per second of wall time.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Calls) / r.Elapsed.Seconds()
}

// Quantile returns the latency below which a fraction q of the successful
// calls fell (nearest rank), or 0 when there were none.
func (r Result) Quantile(q float64) time.Duration {
	n := len(r.latencies)
	if n == 0 {
		return 0
	}
	i := int(q*float64(n)+0.5) - 1
	i = max(0, min(i, n-1))
	return time.Duration(r.latencies[i])
}

// AdmittedShare is the fraction of calls admitted.
func (r Result) AdmittedShare() float64 {
	if r.Calls == 0 {
		return 0
	}
	return float64(r.Admitted) / float64(r.Calls)
}

// Merge adds runs of the same target and concurrency together: calls and
// elapsed times add up, latency samples are pooled.
func Merge(rs ...Result) Result {
	var m Result
	for _, r := range rs {
		m.Calls += r.Calls
		m.Admitted += r.Admitted
		m.Errors += r.Errors
		m.Elapsed += r.Elapsed
		if m.FirstErr == nil {
			m.FirstErr = r.FirstErr
		}
		m.latencies = append(m.latencies, r.latencies...)
	}
	slices.Sort(m.latencies)
	return m
}

type caller struct {
	calls, admitted, errors int64
	firstErr                error
	lat                     []int64
}

// Run drives t with l and measures it. It returns early, with what it has
// measured, when ctx is done.
func Run(ctx context.Context, t Target, l Load) Result {
	conc := max(l.Concurrency, 1)
	callers := make([]caller, conc)
	var (
		next     atomic.Int64 // calls handed out, when l.Calls > 0
		deadline time.Time
		start    = make(chan struct{})
		wg       sync.WaitGroup
	)
	for i := range callers {
		c := &callers[i]
		if l.Calls > 0 {
			c.lat = make([]int64, 0, l.Calls/int64(conc)+1)
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(l.Seed, uint64(i)))
			<-start
			for ctx.Err() == nil {
				if l.Calls > 0 {
					if next.Add(1) > l.Calls {
						return
					}
				} else if !time.Now().Before(deadline) {
					return
				}
				id := l.IDs[rng.IntN(len(l.IDs))]
				t0 := time.Now()
				ok, err := t.Allow(ctx, id)
				d := time.Since(t0)
				c.calls++
				if err != nil {
					c.errors++
					if c.firstErr == nil {
						c.firstErr = err
					}
					continue
				}
				c.lat = append(c.lat, int64(d))
				if ok {
					c.admitted++
				}
			}
		})
	}
	t0 := time.Now()
	deadline = t0.Add(l.Duration)
	close(start)
	wg.Wait()
	r := Result{Elapsed: time.Since(t0)}
	n := 0
	for i := range callers {
		n += len(callers[i].lat)
	}
	r.latencies = make([]int64, 0, n)
	for i := range callers {
		c := &callers[i]
		r.Calls += c.calls
		r.Admitted += c.admitted
		r.Errors += c.errors
		if r.FirstErr == nil {
			r.FirstErr = c.firstErr
		}
		r.latencies = append(r.latencies, c.lat...)
	}
	slices.Sort(r.latencies)
	return r
}
