// Package downstreamtest provides a fake third-party API for tests,
// benchmarks and the demo, as net/http/httptest does for net/http: an HTTP
// server on a loopback port that enforces a quota exactly, answers 429 with
// Retry-After above it, can be told to misbehave, and records the arrival
// time of every call. It is kept out of package downstream so that
// programs using the throttled Transport do not link it.
package downstreamtest

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Mode is how a Server enforces its quota.
type Mode int

const (
	// Strict enforces Config.Rate as a GCRA (the generic cell rate
	// algorithm, a leaky bucket used as a meter) with an emission interval
	// T = 1/Rate and a tolerance of Config.Tolerance intervals.
	//
	// The state is one theoretical arrival time (TAT). A call arriving at
	// t is allowed when max(TAT, t) - t <= Tolerance*T, and then moves TAT
	// to max(TAT, t) + T; otherwise it gets 429 and TAT stays where it was
	// (a refused call consumes no quota). So from rest the server allows
	// Tolerance+1 calls at once (three at Tolerance 2), then one every T;
	// calls spaced exactly T apart are never refused; and any window of
	// one second holds at most ceil(Rate)+Tolerance allowed calls. The
	// tolerance is what absorbs network jitter in front of a client that
	// paces correctly.
	Strict Mode = iota
	// Shopify behaves like Shopify's REST Admin API: a leaky bucket of
	// Config.BucketSize calls that leaks Rate calls per second. A call
	// that would overflow the bucket gets 429 with "Retry-After: 2.0", and
	// every answer carries X-Shopify-Shop-Api-Call-Limit: "used/size",
	// where used counts the call itself and rounds partly leaked calls up.
	// The bucket is the same GCRA as Strict's with a tolerance of
	// BucketSize-1 intervals: from empty it takes BucketSize calls at
	// once. Tolerance is ignored.
	Shopify
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Strict:
		return "strict"
	case Shopify:
		return "shopify"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Config configures a Server. The zero value is an unlimited
// server that answers every call at once with 200.
type Config struct {
	// Rate is the quota in calls per second; 0 is unlimited (every call
	// is allowed and no quota header is sent). When positive it must lie
	// in [1e-6, 1e9]. The emission interval 1/Rate is rounded up to the
	// nanosecond, so the server never allows more than Rate.
	Rate float64
	// Tolerance is Strict's burst tolerance in calls (see Strict).
	// 0 means the default, 1% of one second's quota rounded down and at
	// least 2: max(2, floor(Rate/100)). A negative value means no tolerance
	// at all: a call earlier than its theoretical arrival time by even a
	// nanosecond is refused.
	Tolerance int
	// Mode chooses the enforcement; the default is Strict.
	Mode Mode
	// BucketSize is Shopify's bucket in calls; 0 means 40, Shopify's
	// standard bucket.
	BucketSize int
	// Latency delays the answer to each allowed call (the simulated work),
	// or less if the client gives up or the server closes first. Refusals
	// and faults are answered at once.
	Latency time.Duration
	// MaxConcurrent, when positive, answers 429 (Retry-After: 1) to a call
	// that arrives while MaxConcurrent calls are already in flight; such a
	// call consumes no quota. A call is in flight from its arrival until
	// its answer is written (or the client gives up).
	MaxConcurrent int
	// Headers adds the quota's state to answers that are not faults:
	// RateLimit-Policy and RateLimit in the structured-field form of
	// draft-ietf-httpapi-ratelimit-headers, and X-RateLimit-Limit,
	// X-RateLimit-Remaining and X-RateLimit-Reset (delta seconds). See
	// Server for their values.
	Headers bool
	// Clock reads the time of each arrival; nil means time.Now, whose
	// monotonic readings make the quota immune to wall clock steps. Tests
	// set it to drive time explicitly; it is called with the server's lock
	// held, once per call, so it must not call back into the server.
	Clock func() time.Time
}

// FaultKind is a scripted misbehaviour of a Server.
type FaultKind int

const (
	// FaultKindNone: the server enforces its quota normally.
	FaultKindNone FaultKind = iota
	// FaultKind429Seconds: every call gets 429 with Retry-After in
	// delta-seconds, Fault.RetryAfter rounded up to a whole second.
	FaultKind429Seconds
	// FaultKind429Date: every call gets 429 with Retry-After as an
	// HTTP-date Fault.RetryAfter after the call's arrival, rounded up to
	// the next whole second (an HTTP-date has no fraction), so it is never
	// less than Fault.RetryAfter away.
	FaultKind429Date
	// FaultKind429NoHeader: every call gets 429 without Retry-After.
	FaultKind429NoHeader
	// FaultKind503: every call gets 503, with Retry-After in delta-seconds
	// (Fault.RetryAfter rounded up) when Fault.RetryAfter is positive and
	// without it otherwise.
	FaultKind503
	// FaultKindHang: no call is answered; each is held until its client
	// gives up or the server closes.
	FaultKindHang
)

// String returns the kind's name.
func (k FaultKind) String() string {
	switch k {
	case FaultKindNone:
		return "none"
	case FaultKind429Seconds:
		return "429-seconds"
	case FaultKind429Date:
		return "429-date"
	case FaultKind429NoHeader:
		return "429-no-header"
	case FaultKind503:
		return "503"
	case FaultKindHang:
		return "hang"
	}
	return "FaultKind(" + strconv.Itoa(int(k)) + ")"
}

// Fault is a Server's scripted misbehaviour, set with SetFault and
// applied to every call that arrives until the next SetFault. A call that
// meets a fault is recorded as an arrival but consumes no quota, and its
// answer carries no quota headers. Build one with the constructors below or
// as a literal.
type Fault struct {
	// Kind is the misbehaviour.
	Kind FaultKind
	// RetryAfter is what the kinds that send Retry-After announce; a
	// negative value counts as 0.
	RetryAfter time.Duration
}

// Faults without a parameter.
var (
	// FaultNone clears any fault: the server enforces its quota normally.
	FaultNone = Fault{Kind: FaultKindNone}
	// Fault429NoHeader answers every call 429 without Retry-After.
	Fault429NoHeader = Fault{Kind: FaultKind429NoHeader}
	// FaultHang answers no call: each is held until its client gives up
	// or Close.
	FaultHang = Fault{Kind: FaultKindHang}
)

// Fault429Seconds answers every call 429 with "Retry-After: n" (n below 0
// sends 0).
func Fault429Seconds(n int) Fault {
	return Fault{Kind: FaultKind429Seconds, RetryAfter: time.Duration(max(n, 0)) * time.Second}
}

// Fault429Date answers every call 429 with Retry-After as an HTTP-date d
// after the call's arrival, rounded up to the next whole second.
func Fault429Date(d time.Duration) Fault {
	return Fault{Kind: FaultKind429Date, RetryAfter: d}
}

// Fault503 answers every call 503 with "Retry-After: n" when n is
// positive, and without Retry-After otherwise.
func Fault503(n int) Fault {
	return Fault{Kind: FaultKind503, RetryAfter: time.Duration(max(n, 0)) * time.Second}
}

// Counts is what a Server has answered since it started or since
// its last Reset. Each call is counted when it arrives, with the answer
// decided then, even if the client gives up before the answer is written.
type Counts struct {
	// Total counts every call received: len(Arrivals()).
	Total int
	// OK counts the calls answered with a 2xx status.
	OK int
	// Limited counts the calls answered with 429, whatever the reason
	// (quota, MaxConcurrent or a fault).
	Limited int
	// ByStatus counts the calls by the status of their answer.
	ByStatus map[int]int
	// Hung counts the calls held by FaultHang, which have no status.
	// Total is the sum of ByStatus plus Hung.
	Hung int
	// InFlight is the number of calls in flight when Counts was called.
	InFlight int
	// MaxInFlight is the largest number of calls that were in flight at
	// once, counting those refused for it.
	MaxInFlight int
}

// Server is a third-party API for tests, benchmarks and the demo, in
// the style of net/http/httptest: it listens on a loopback port, accepts
// any method and path, reads and discards the request body, enforces a
// quota (see Mode) decided exactly, under one lock, at each call's
// arrival time, and records every arrival. Answers are small JSON bodies:
// {"ok":true} for an allowed call, an error object otherwise.
//
// With Config.Headers the answers describe the quota's state after the
// call: for Strict, RateLimit-Policy: "default";q=Q;w=W states the
// Rate as Q calls per W seconds, with W the smallest whole number of
// seconds up to an hour in which Rate makes a whole number of calls (or, for
// a rate that has none, W = ceil(1/Rate) and Q the calls in W rounded
// down); RateLimit: "default";r=R;t=S states the R calls that would be
// allowed if sent at once now (capped at Q) and the S seconds, rounded up,
// until the server is back at rest. X-RateLimit-Limit, -Remaining and
// -Reset carry Q, R and S. For Shopify, Q is the bucket size, W the
// seconds it takes to leak a full bucket (rounded up), R the room left in
// the bucket and S the seconds until it is empty.
//
// A refused call gets 429 with Retry-After in whole seconds, rounded up
// and at least 1, when the next call would be allowed (Shopify: "2.0",
// as Shopify sends).
type Server struct {
	cfg       Config
	now       func() time.Time
	interval  time.Duration // the emission interval; 0: unlimited
	tolerance time.Duration // how far ahead of a call TAT may be
	policy    string        // the RateLimit-Policy value
	limit     int64         // Q, the stated quota
	url       string
	srv       *http.Server
	client    *http.Client
	stop      chan struct{} // closed by Close: releases held calls
	served    chan struct{} // closed when Serve returns
	closeOnce sync.Once
	calls     sync.WaitGroup // the handlers running

	mu       sync.Mutex
	closed   bool
	tat      time.Time // the theoretical arrival time
	fault    Fault
	arrivals []time.Time
	counts   Counts // all but InFlight
	inFlight int
}

// NewServer starts a Server on 127.0.0.1 (or ::1 when IPv4 has no
// loopback), on a port of the system's choosing; Close stops it. Like
// httptest.NewServer, it panics when it cannot listen, and also on an
// invalid configuration: a Rate that is not 0 or within [1e-6, 1e9], a
// negative BucketSize, MaxConcurrent or Latency, an unknown Mode, or a
// Tolerance or BucketSize so large that the bucket's span overflows.
func NewServer(cfg Config) *Server {
	f := &Server{
		cfg:      cfg,
		now:      cfg.Clock,
		stop:     make(chan struct{}),
		served:   make(chan struct{}),
		arrivals: make([]time.Time, 0, 8192),
		counts:   Counts{ByStatus: map[int]int{}},
	}
	if f.now == nil {
		f.now = time.Now
	}
	if err := f.configure(); err != nil {
		panic("downstreamtest: NewServer: " + err.Error())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		if ln, err = net.Listen("tcp6", "[::1]:0"); err != nil {
			panic("downstreamtest: NewServer: cannot listen on a loopback port: " + err.Error())
		}
	}
	f.url = "http://" + ln.Addr().String()
	f.srv = &http.Server{
		Handler:           http.HandlerFunc(f.serve),
		ReadHeaderTimeout: time.Minute,
	}
	f.client = &http.Client{Transport: &http.Transport{
		Proxy:               nil, // loopback: never through a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}}
	go func() {
		defer close(f.served)
		_ = f.srv.Serve(ln) // returns http.ErrServerClosed on Close
	}()
	return f
}

// configure checks f.cfg, fills in its defaults and derives the GCRA's
// parameters.
func (f *Server) configure() error {
	c := &f.cfg
	switch {
	case math.IsNaN(c.Rate) || c.Rate < 0 || c.Rate > 0 && (c.Rate < 1e-6 || c.Rate > 1e9):
		return fmt.Errorf("Rate %v is not 0 or within [1e-6, 1e9] calls per second", c.Rate)
	case c.BucketSize < 0:
		return fmt.Errorf("negative BucketSize %d", c.BucketSize)
	case c.MaxConcurrent < 0:
		return fmt.Errorf("negative MaxConcurrent %d", c.MaxConcurrent)
	case c.Latency < 0:
		return fmt.Errorf("negative Latency %v", c.Latency)
	case c.Mode != Strict && c.Mode != Shopify:
		return fmt.Errorf("unknown Mode %v", c.Mode)
	}
	switch {
	case c.Tolerance == 0:
		c.Tolerance = max(2, int(c.Rate/100))
	case c.Tolerance < 0:
		c.Tolerance = 0
	}
	if c.BucketSize == 0 {
		c.BucketSize = 40
	}
	if c.Rate == 0 {
		return nil
	}
	// 1e9/Rate is at most 1e15 ns, far from overflow.
	f.interval = time.Duration(math.Ceil(float64(time.Second) / c.Rate))
	calls := int64(c.Tolerance)
	if c.Mode == Shopify {
		calls = int64(c.BucketSize) - 1
	}
	// Keep the span of a full bucket, plus one interval, within int64.
	if calls > math.MaxInt64/int64(f.interval)-2 {
		return fmt.Errorf("a bucket of %d calls at %v per call overflows", calls+1, f.interval)
	}
	f.tolerance = time.Duration(calls) * f.interval
	var window int64
	if c.Mode == Shopify {
		f.limit = int64(c.BucketSize)
		window = fakeCeilSeconds(time.Duration(c.BucketSize) * f.interval)
	} else {
		f.limit, window = fakeQuota(c.Rate)
	}
	f.policy = `"default";q=` + strconv.FormatInt(f.limit, 10) + ";w=" + strconv.FormatInt(window, 10)
	return nil
}

// fakeQuota states rate as q calls per w seconds: the smallest whole w up
// to an hour in which rate makes a whole number of calls or, failing that,
// w = ceil(1/rate) and q the calls in w rounded down (understating, never
// overstating, the quota).
func fakeQuota(rate float64) (q, w int64) {
	for w := int64(1); w <= 3600; w++ {
		x := rate * float64(w)
		if r := math.Round(x); r >= 1 && math.Abs(x-r) <= 1e-9*x {
			return int64(r), w
		}
	}
	w = max(1, int64(math.Ceil(1/rate)))
	return max(1, int64(rate*float64(w))), w
}

// fakeCeilSeconds returns d in whole seconds, rounded up; 0 when d is not
// positive.
func fakeCeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// URL returns the server's base URL, such as http://127.0.0.1:41234. Any
// path below it is served.
func (f *Server) URL() string { return f.url }

// Client returns an HTTP client for the server, with room for 1024 idle
// connections so that a load test does not churn through ephemeral ports.
// Close closes its idle connections.
func (f *Server) Client() *http.Client { return f.client }

// Close stops the server: it refuses new connections, closes the open
// ones, aborts the calls held by FaultHang or in their Latency (their
// clients see the connection close, with no answer), and waits for every
// handler to return (each does so promptly). Arrivals and Counts
// remain readable. Close may be called more than once.
func (f *Server) Close() {
	f.closeOnce.Do(func() {
		f.mu.Lock()
		f.closed = true // from here no handler joins f.calls
		f.mu.Unlock()
		close(f.stop)
		_ = f.srv.Close()
		<-f.served
		f.calls.Wait()
		f.client.CloseIdleConnections()
	})
}

// SetFault changes the server's behaviour for the calls that arrive from
// now on; FaultNone restores normal service. Calls already held by
// FaultHang stay held.
func (f *Server) SetFault(fault Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

// Arrivals returns a copy of the arrival time of every call since the
// server started or was last Reset, sorted, whatever its answer. Each is
// read from the clock (time.Now, with its monotonic reading, unless
// Config.Clock says otherwise) as the handler starts, before the body
// is read, under the lock that decides the quota: the order of the
// arrivals is the order in which the calls were decided. The result is
// never nil.
func (f *Server) Arrivals() []time.Time {
	f.mu.Lock()
	a := slices.Clone(f.arrivals)
	f.mu.Unlock()
	if a == nil {
		a = []time.Time{}
	}
	// Arrivals are read and appended under one lock, so they are in order
	// unless an injected clock went backwards; sorting sorted input is
	// linear.
	slices.SortFunc(a, time.Time.Compare)
	return a
}

// Counts returns what the server has answered since it started or was
// last Reset.
func (f *Server) Counts() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counts
	c.ByStatus = make(map[int]int, len(f.counts.ByStatus))
	for k, v := range f.counts.ByStatus {
		c.ByStatus[k] = v
	}
	c.InFlight = f.inFlight
	return c
}

// Reset forgets the arrivals and counts between the phases of a test or
// benchmark. The quota's state and the fault are kept, and MaxInFlight
// restarts from the calls in flight now.
func (f *Server) Reset() {
	f.mu.Lock()
	f.arrivals = f.arrivals[:0]
	f.counts = Counts{ByStatus: map[int]int{}, MaxInFlight: f.inFlight}
	f.mu.Unlock()
}

// fakeDecision is the answer to one call, decided at its arrival.
type fakeDecision struct {
	status     int
	hang       bool
	retryAfter string // the Retry-After value; "" for none
	body       string
	quota      bool          // describe the quota in the headers
	backlog    time.Duration // max(TAT - arrival, 0) after the decision
}

// The bodies of the answers.
const (
	fakeBodyOK          = `{"ok":true}`
	fakeBodyLimited     = `{"error":"rate limited"}`
	fakeBodyConcurrency = `{"error":"too many concurrent requests"}`
	fakeBodyUnavailable = `{"error":"service unavailable"}`
)

// decide decides the call arriving at now and records the decision in the
// counts; f.mu must be held and the call counted in f.inFlight.
func (f *Server) decide(now time.Time) fakeDecision {
	d := f.decision(now)
	switch {
	case d.hang:
		f.counts.Hung++
	default:
		f.counts.ByStatus[d.status]++
		if d.status >= 200 && d.status < 300 {
			f.counts.OK++
		} else if d.status == http.StatusTooManyRequests {
			f.counts.Limited++
		}
	}
	return d
}

// decision applies the fault, MaxConcurrent and the quota, in that order,
// to the call arriving at now; f.mu must be held.
func (f *Server) decision(now time.Time) fakeDecision {
	switch f.fault.Kind {
	case FaultKindHang:
		return fakeDecision{hang: true}
	case FaultKind429Seconds:
		return fakeDecision{status: http.StatusTooManyRequests, body: fakeBodyLimited,
			retryAfter: strconv.FormatInt(fakeCeilSeconds(f.fault.RetryAfter), 10)}
	case FaultKind429Date:
		at := now.Add(max(f.fault.RetryAfter, 0))
		if r := at.Truncate(time.Second); !r.Equal(at) {
			at = r.Add(time.Second)
		}
		return fakeDecision{status: http.StatusTooManyRequests, body: fakeBodyLimited,
			retryAfter: at.UTC().Format(http.TimeFormat)}
	case FaultKind429NoHeader:
		return fakeDecision{status: http.StatusTooManyRequests, body: fakeBodyLimited}
	case FaultKind503:
		d := fakeDecision{status: http.StatusServiceUnavailable, body: fakeBodyUnavailable}
		if s := fakeCeilSeconds(f.fault.RetryAfter); s > 0 {
			d.retryAfter = strconv.FormatInt(s, 10)
		}
		return d
	}
	d := fakeDecision{status: http.StatusOK, body: fakeBodyOK, quota: f.interval > 0}
	if f.interval > 0 {
		d.backlog = max(f.tat.Sub(now), 0)
	}
	if f.cfg.MaxConcurrent > 0 && f.inFlight > f.cfg.MaxConcurrent {
		d.status, d.body, d.retryAfter = http.StatusTooManyRequests, fakeBodyConcurrency, "1"
		return d
	}
	if f.interval == 0 {
		return d
	}
	if d.backlog > f.tolerance {
		d.status = http.StatusTooManyRequests
		if f.cfg.Mode == Shopify {
			d.retryAfter = "2.0"
			d.body = fmt.Sprintf(`{"errors":"Exceeded %s calls per second for api client. Reduce request rates to resume uninterrupted service."}`,
				strconv.FormatFloat(f.cfg.Rate, 'g', -1, 64))
		} else {
			d.retryAfter = strconv.FormatInt(max(1, fakeCeilSeconds(d.backlog-f.tolerance)), 10)
			d.body = fakeBodyLimited
		}
		return d
	}
	f.tat = now.Add(d.backlog + f.interval)
	d.backlog += f.interval
	return d
}

// setHeaders writes d's headers into h.
func (f *Server) setHeaders(h http.Header, d fakeDecision) {
	h.Set("Content-Type", "application/json")
	if d.retryAfter != "" {
		h.Set("Retry-After", d.retryAfter)
	}
	if !d.quota {
		return
	}
	// The calls that would be allowed at once: k more fit while
	// backlog + (k-1)*interval <= tolerance.
	var room int64
	if d.backlog <= f.tolerance {
		room = int64((f.tolerance-d.backlog)/f.interval) + 1
	}
	reset := strconv.FormatInt(fakeCeilSeconds(d.backlog), 10)
	if f.cfg.Mode == Shopify {
		used := min(f.limit, int64((d.backlog+f.interval-1)/f.interval))
		h.Set("X-Shopify-Shop-Api-Call-Limit", strconv.FormatInt(used, 10)+"/"+strconv.FormatInt(f.limit, 10))
		room = f.limit - used
	}
	if !f.cfg.Headers {
		return
	}
	remaining := strconv.FormatInt(min(room, f.limit), 10)
	h.Set("RateLimit-Policy", f.policy)
	h.Set("RateLimit", `"default";r=`+remaining+";t="+reset)
	h.Set("X-RateLimit-Limit", strconv.FormatInt(f.limit, 10))
	h.Set("X-RateLimit-Remaining", remaining)
	h.Set("X-RateLimit-Reset", reset)
}

// serve is the handler of every call.
func (f *Server) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	f.calls.Add(1)
	defer f.calls.Done()
	now := f.now()
	f.arrivals = append(f.arrivals, now)
	f.counts.Total++
	f.inFlight++
	f.counts.MaxInFlight = max(f.counts.MaxInFlight, f.inFlight)
	d := f.decide(now)
	f.mu.Unlock()

	inFlight := true
	done := func() {
		if inFlight {
			inFlight = false
			f.mu.Lock()
			f.inFlight--
			f.mu.Unlock()
		}
	}
	defer done()

	_, _ = io.Copy(io.Discard, r.Body)
	switch {
	case d.hang:
		select {
		case <-r.Context().Done():
			return
		case <-f.stop:
			// Abort: returning would send an empty 200.
			panic(http.ErrAbortHandler)
		}
	case d.status < 300 && f.cfg.Latency > 0:
		t := time.NewTimer(f.cfg.Latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-f.stop:
			panic(http.ErrAbortHandler)
		}
	}
	f.setHeaders(w.Header(), d)
	// The answer is decided and about to leave: the call is no longer in
	// flight, so a client that waits for it before sending the next one
	// never finds MaxConcurrent calls still counted.
	done()
	w.WriteHeader(d.status)
	_, _ = io.WriteString(w, d.body)
}
