// Package downstreamtest provides a fake third-party API for tests,
// benchmarks and the demo, as net/http/httptest does for net/http: an HTTP
// server on a loopback port that enforces a quota exactly, answers 429 with
// Retry-After above it, can be told to misbehave, and records the arrival
// time of every call. It is kept out of package downstream so that
// programs using the throttled Transport do not link it.
package downstreamtest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/algorithms"
)

// Config configures a Server. The zero value is an unlimited server that
// answers every call at once with 200.
type Config struct {
	// Rate is the quota in calls per second; 0 is unlimited. The server
	// enforces it as algorithms.GCRA with a burst of Tolerance+1: from
	// rest it allows Tolerance+1 calls at once, then one every 1/Rate, so
	// calls spaced 1/Rate apart are never refused and any window of one
	// second holds at most Rate+Tolerance allowed calls. A refused call
	// consumes nothing and gets 429 with Retry-After: the seconds until
	// the next call would be allowed, rounded up, at least 1.
	Rate int
	// Tolerance is the burst tolerance in calls. 0 means the default,
	// max(2, Rate/100); a negative value means none.
	Tolerance int
	// Latency delays the answer to each allowed call (the simulated work),
	// or less if the client gives up or the server closes first.
	Latency time.Duration
	// MaxConcurrent, when positive, answers 429 (Retry-After: 1) to a call
	// that arrives while MaxConcurrent calls are already in flight; such a
	// call consumes no quota. A call is in flight from its arrival until
	// its answer is written (or its client gives up).
	MaxConcurrent int
	// ConcurrencyReason, when set, answers a call refused for
	// MaxConcurrent as Stripe does: 429 without Retry-After, with
	// Stripe-Rate-Limited-Reason set to it ("global-concurrency"); the
	// quota's refusals then carry Stripe-Rate-Limited-Reason: global-rate.
	ConcurrencyReason string
	// Clock reads the time of each arrival, with the server's lock held;
	// nil means time.Now.
	Clock func() time.Time
}

// Fault is a scripted misbehaviour of a Server, set with SetFault and
// applied to every call that arrives until the next SetFault. A call that
// meets a fault is recorded as an arrival but consumes no quota.
type Fault struct {
	status int           // the answer's status; 0: no fault
	hang   bool          // no answer at all
	retry  string        // Retry-After; "": none
	dated  bool          // Retry-After as an HTTP-date, date after the arrival
	date   time.Duration // how far after the arrival, when dated
}

// Faults without a parameter.
var (
	// FaultNone clears any fault: the server enforces its quota normally.
	FaultNone = Fault{}
	// Fault429NoHeader answers every call 429 without Retry-After.
	Fault429NoHeader = Fault{status: http.StatusTooManyRequests}
	// FaultHang answers no call: each is held until its client gives up
	// or Close.
	FaultHang = Fault{hang: true}
)

// Fault429Seconds answers every call 429 with "Retry-After: n" (n below 0
// sends 0).
func Fault429Seconds(n int) Fault {
	return Fault{status: http.StatusTooManyRequests, retry: strconv.Itoa(max(n, 0))}
}

// Fault429Date answers every call 429 with Retry-After as an HTTP-date d
// after the call's arrival, rounded up to the next whole second.
func Fault429Date(d time.Duration) Fault {
	return Fault{status: http.StatusTooManyRequests, dated: true, date: max(d, 0)}
}

// Fault503 answers every call 503 with "Retry-After: n" when n is
// positive, and without Retry-After otherwise.
func Fault503(n int) Fault {
	if n <= 0 {
		return Fault{status: http.StatusServiceUnavailable}
	}
	return Fault{status: http.StatusServiceUnavailable, retry: strconv.Itoa(n)}
}

// Counts is what a Server has answered. Each call is counted when it
// arrives, with the answer decided then.
type Counts struct {
	// Total counts every call received: len(Arrivals()).
	Total int
	// OK counts the calls answered with 200.
	OK int
	// Limited counts the calls answered with 429, whatever the reason
	// (quota, MaxConcurrent or a fault).
	Limited int
	// ByStatus counts the calls by status (FaultHang's calls have none).
	ByStatus map[int]int
	// InFlight is the number of calls in flight now.
	InFlight int
	// MaxInFlight is the largest number of calls that were in flight at
	// once, counting those refused for it.
	MaxInFlight int
}

// Server is a third-party API for tests: it listens on a loopback port,
// accepts any method and path, reads and discards the request body,
// decides each call's answer at its arrival, under one lock, and records
// every arrival. Answers are small JSON bodies: {"ok":true} for an allowed
// call, an error object otherwise.
type Server struct {
	cfg      Config
	ts       *httptest.Server
	limiter  *algorithms.Local // nil: unlimited
	start    time.Time         // the clock's first reading
	stop     chan struct{}     // closed by Close: releases held calls
	stopOnce sync.Once

	mu       sync.Mutex
	now      time.Time // the limiter's clock: the arrival being decided
	fault    Fault
	arrivals []time.Time
	counts   Counts
}

// The bodies of the answers.
const (
	bodyOK          = `{"ok":true}`
	bodyLimited     = `{"error":"rate limited"}`
	bodyConcurrency = `{"error":"too many concurrent requests"}`
	bodyUnavailable = `{"error":"service unavailable"}`
)

// NewServer starts a Server on a loopback port; Close stops it. Like
// httptest.NewServer it panics when it cannot listen, and also on a
// negative Rate, Latency or MaxConcurrent, and on a Rate or Tolerance that
// algorithms.Policy refuses.
func NewServer(cfg Config) *Server {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	f := &Server{cfg: cfg, start: cfg.Clock(), stop: make(chan struct{}), counts: Counts{ByStatus: map[int]int{}}}
	if cfg.Rate < 0 || cfg.Latency < 0 || cfg.MaxConcurrent < 0 {
		panic(fmt.Sprintf("downstreamtest: NewServer: negative Rate, Latency or MaxConcurrent in %+v", cfg))
	}
	if cfg.Rate > 0 {
		tol := cfg.Tolerance
		if tol == 0 {
			tol = max(2, cfg.Rate/100)
		}
		p := algorithms.Policy{Algorithm: algorithms.GCRA, Limit: int64(cfg.Rate), Period: time.Second, Burst: int64(max(tol, 0)) + 1}
		var err error
		f.limiter, err = algorithms.NewLocal(p, &algorithms.LocalOptions{Clock: func() time.Time { return f.now }})
		if err != nil {
			panic("downstreamtest: NewServer: " + err.Error())
		}
	}
	f.ts = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// URL returns the server's base URL, such as http://127.0.0.1:41234. Any
// path below it is served.
func (f *Server) URL() string { return f.ts.URL }

// Close stops the server: it aborts the calls held by FaultHang or in
// their Latency (their clients see the connection close, with no answer)
// and waits for every handler to return. Close may be called again.
func (f *Server) Close() {
	f.stopOnce.Do(func() { close(f.stop) })
	f.ts.Close()
}

// SetFault changes the server's behaviour for the calls that arrive from
// now on; FaultNone restores normal service. Calls already held by
// FaultHang stay held.
func (f *Server) SetFault(fault Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

// Arrivals returns the arrival time of every call, sorted, whatever its
// answer: read from the clock as the handler starts, under the lock that
// decides the quota, and kept to the microsecond the quota was decided on
// (the clock's first reading plus whole microseconds). Never nil.
func (f *Server) Arrivals() []time.Time {
	f.mu.Lock()
	a := append([]time.Time{}, f.arrivals...)
	f.mu.Unlock()
	slices.SortFunc(a, time.Time.Compare) // in order unless a Clock went back
	return a
}

// Counts returns what the server has answered.
func (f *Server) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counts
	c.ByStatus = maps.Clone(c.ByStatus)
	c.OK, c.Limited = c.ByStatus[http.StatusOK], c.ByStatus[http.StatusTooManyRequests]
	return c
}

// MaxInWindow returns the largest number of arrivals (sorted, as Arrivals
// returns them) in one half-open window [t, t+window), over every t: two
// arrivals exactly window apart never share one. A downstream that allows
// n calls per second has been respected when MaxInWindow(arrivals,
// time.Second) <= n. A window that is not positive holds nothing.
func MaxInWindow(arrivals []time.Time, window time.Duration) int {
	if window <= 0 {
		return 0
	}
	best, lo := 0, 0
	for hi, t := range arrivals {
		for t.Sub(arrivals[lo]) >= window {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// decide returns the answer to the call arriving at at, with status 0 for
// no answer (FaultHang); f.mu must be held and the call counted in flight.
func (f *Server) decide(at time.Time) (status int, retryAfter, body string) {
	status, retryAfter, body = f.decideQuota(at)
	if f.cfg.ConcurrencyReason != "" && body == bodyConcurrency {
		retryAfter = ""
	}
	return status, retryAfter, body
}

// decideQuota is decide, before ConcurrencyReason.
func (f *Server) decideQuota(at time.Time) (status int, retryAfter, body string) {
	switch flt := f.fault; {
	case flt.hang:
		return 0, "", ""
	case flt.dated:
		date := at.Add(flt.date + time.Second - 1).Truncate(time.Second)
		return flt.status, date.UTC().Format(http.TimeFormat), bodyLimited
	case flt.status != 0:
		if body = bodyLimited; flt.status == http.StatusServiceUnavailable {
			body = bodyUnavailable
		}
		return flt.status, flt.retry, body
	case f.cfg.MaxConcurrent > 0 && f.counts.InFlight > f.cfg.MaxConcurrent:
		return http.StatusTooManyRequests, "1", bodyConcurrency
	case f.limiter == nil:
		return http.StatusOK, "", bodyOK
	}
	f.now = time.UnixMicro(at.Sub(f.start).Microseconds())
	d, err := f.limiter.AllowN(context.Background(), "quota", 1)
	if err != nil || d.Allowed {
		return http.StatusOK, "", bodyOK // AllowN fails only on arguments, which are fixed
	}
	secs := max(1, (d.RetryAfter+time.Second-1)/time.Second)
	return http.StatusTooManyRequests, strconv.FormatInt(int64(secs), 10), bodyLimited
}

// serve is the handler of every call.
func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	now := f.cfg.Clock()
	at := f.start.Add(now.Sub(f.start).Truncate(time.Microsecond))
	f.arrivals = append(f.arrivals, at)
	f.counts.Total++
	f.counts.InFlight++
	f.counts.MaxInFlight = max(f.counts.MaxInFlight, f.counts.InFlight)
	status, retryAfter, body := f.decide(at)
	if status != 0 {
		f.counts.ByStatus[status]++
	}
	f.mu.Unlock()

	leave := sync.OnceFunc(func() {
		f.mu.Lock()
		f.counts.InFlight--
		f.mu.Unlock()
	})
	defer leave()

	_, _ = io.Copy(io.Discard, r.Body)
	var wait <-chan time.Time // nil: held until the client or Close ends it
	if status == http.StatusOK && f.cfg.Latency > 0 {
		t := time.NewTimer(f.cfg.Latency)
		defer t.Stop()
		wait = t.C
	}
	if status == 0 || wait != nil {
		select {
		case <-wait:
		case <-r.Context().Done():
			return
		case <-f.stop:
			panic(http.ErrAbortHandler) // returning would send an empty 200
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	if reason := f.cfg.ConcurrencyReason; reason != "" && status == http.StatusTooManyRequests {
		if body != bodyConcurrency {
			reason = "global-rate"
		}
		w.Header().Set("Stripe-Rate-Limited-Reason", reason)
	}
	// The answer is about to leave: the call is no longer in flight, so a
	// client that waits for it before sending the next one never finds
	// MaxConcurrent calls still counted.
	leave()
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}
