package downstreamtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pacestat"
)

// fakeTestClock is a clock that tests move by hand. The server reads it
// from its handler goroutines, so it locks.
type fakeTestClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeTestClock() *fakeTestClock {
	return &fakeTestClock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeTestClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeTestClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeAnswer is what one call to a Server got.
type fakeAnswer struct {
	status int
	header http.Header
	body   string
}

// fakeDo sends one call to f and reads its answer.
func fakeDo(t *testing.T, f *Server, method, path, body string) fakeAnswer {
	t.Helper()
	req, err := http.NewRequest(method, f.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return fakeAnswer{resp.StatusCode, resp.Header, string(b)}
}

func fakeGet(t *testing.T, f *Server) fakeAnswer {
	t.Helper()
	return fakeDo(t, f, http.MethodGet, "/", "")
}

// fakeWant checks the headers of an answer: a value of "" means absent.
func fakeWant(t *testing.T, what string, a fakeAnswer, status int, headers ...string) {
	t.Helper()
	if a.status != status {
		t.Errorf("%s: status %d, want %d (body %s)", what, a.status, status, a.body)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		name, want := headers[i], headers[i+1]
		got := a.header.Values(name)
		switch {
		case want == "" && len(got) > 0:
			t.Errorf("%s: %s: %q, want none", what, name, got)
		case want != "" && (len(got) != 1 || got[0] != want):
			t.Errorf("%s: %s: %q, want %q", what, name, got, want)
		}
	}
}

// fakeEventually polls cond for up to five seconds.
func fakeEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// newFakeDecider builds a Server that does not listen, for driving
// its decisions directly.
func newFakeDecider(t *testing.T, cfg Config) *Server {
	t.Helper()
	f := &Server{cfg: cfg, counts: Counts{ByStatus: map[int]int{}}}
	if err := f.configure(); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFakeStrictBurst(t *testing.T) {
	clock := newFakeTestClock()
	f := NewServer(Config{Rate: 100, Tolerance: 2, Clock: clock.Now})
	defer f.Close()
	// T = 10ms, tolerance 20ms. From rest: backlogs 0, 10ms and 20ms are
	// within the tolerance, so three calls pass; the fourth finds 30ms.
	for i := 1; i <= 3; i++ {
		fakeWant(t, fmt.Sprintf("call %d", i), fakeGet(t, f), http.StatusOK, "Retry-After", "")
	}
	a := fakeGet(t, f)
	fakeWant(t, "call 4", a, http.StatusTooManyRequests, "Retry-After", "1")
	if a.body != fakeBodyLimited {
		t.Errorf("429 body %s", a.body)
	}
	// 10ms later TAT-tolerance is reached: one more, then 429 again.
	clock.Advance(10 * time.Millisecond)
	fakeWant(t, "after one interval", fakeGet(t, f), http.StatusOK)
	fakeWant(t, "right after", fakeGet(t, f), http.StatusTooManyRequests, "Retry-After", "1")
	c := f.Counts()
	want := Counts{Total: 6, OK: 4, Limited: 2, ByStatus: map[int]int{200: 4, 429: 2}, MaxInFlight: 1}
	if !fakeCountsEqual(c, want) {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if got := len(f.Arrivals()); got != 6 {
		t.Errorf("%d arrivals, want 6", got)
	}
}

func fakeCountsEqual(a, b Counts) bool {
	eq := func(x, y map[int]int) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if y[k] != v {
				return false
			}
		}
		return true
	}
	return a.Total == b.Total && a.OK == b.OK && a.Limited == b.Limited && a.Hung == b.Hung &&
		a.InFlight == b.InFlight && a.MaxInFlight == b.MaxInFlight && eq(a.ByStatus, b.ByStatus)
}

func TestFakeStrictSpacedAtIntervalNeverRefused(t *testing.T) {
	for _, tol := range []int{0, -1} { // the default (2) and none at all
		clock := newFakeTestClock()
		f := NewServer(Config{Rate: 100, Tolerance: tol, Clock: clock.Now})
		for i := 0; i < 300; i++ {
			if a := fakeGet(t, f); a.status != http.StatusOK {
				t.Fatalf("tolerance %d: call %d spaced at the interval got %d", tol, i, a.status)
			}
			clock.Advance(10 * time.Millisecond)
		}
		f.Close()
	}
}

func TestFakeStrictZeroToleranceIsExact(t *testing.T) {
	clock := newFakeTestClock()
	f := NewServer(Config{Rate: 100, Tolerance: -1, Clock: clock.Now})
	defer f.Close()
	fakeWant(t, "first", fakeGet(t, f), http.StatusOK)
	clock.Advance(10*time.Millisecond - time.Nanosecond)
	fakeWant(t, "one nanosecond early", fakeGet(t, f), http.StatusTooManyRequests, "Retry-After", "1")
	clock.Advance(time.Nanosecond)
	fakeWant(t, "on time", fakeGet(t, f), http.StatusOK)
}

// TestFakeStrictDecisions steps the GCRA through hand-computed cases
// without HTTP.
func TestFakeStrictDecisions(t *testing.T) {
	type step struct {
		at      time.Duration // since the start
		status  int
		retry   string
		backlog time.Duration
	}
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"rate 100, tolerance 2", Config{Rate: 100, Tolerance: 2}, []step{
			{0, 200, "", 10 * time.Millisecond},
			{0, 200, "", 20 * time.Millisecond},
			{0, 200, "", 30 * time.Millisecond},
			{0, 429, "1", 30 * time.Millisecond}, // refused: TAT unchanged
			{5 * time.Millisecond, 429, "1", 25 * time.Millisecond},
			{10 * time.Millisecond, 200, "", 30 * time.Millisecond},
			{100 * time.Millisecond, 200, "", 10 * time.Millisecond}, // at rest again
		}},
		{"default tolerance at 1000/s is 10", Config{Rate: 1000}, []step{
			{0, 200, "", 1 * time.Millisecond}, {0, 200, "", 2 * time.Millisecond}, {0, 200, "", 3 * time.Millisecond},
			{0, 200, "", 4 * time.Millisecond}, {0, 200, "", 5 * time.Millisecond}, {0, 200, "", 6 * time.Millisecond},
			{0, 200, "", 7 * time.Millisecond}, {0, 200, "", 8 * time.Millisecond}, {0, 200, "", 9 * time.Millisecond},
			{0, 200, "", 10 * time.Millisecond}, {0, 200, "", 11 * time.Millisecond},
			{0, 429, "1", 11 * time.Millisecond},
		}},
		{"slow rate: Retry-After rounds up", Config{Rate: 0.25, Tolerance: -1}, []step{
			{0, 200, "", 4 * time.Second},
			{time.Second, 429, "3", 3 * time.Second},
			{1500 * time.Millisecond, 429, "3", 2500 * time.Millisecond},
			{3999 * time.Millisecond, 429, "1", time.Millisecond},
			{4 * time.Second, 200, "", 4 * time.Second},
		}},
		{"interval rounds up to the nanosecond", Config{Rate: 3, Tolerance: -1}, []step{
			{0, 200, "", 333333334},
			{333333333, 429, "1", 1},
			{333333334, 200, "", 333333334},
		}},
		{"unlimited", Config{}, []step{{0, 200, "", 0}, {0, 200, "", 0}, {0, 200, "", 0}}},
	}
	for _, c := range cases {
		f := newFakeDecider(t, c.cfg)
		start := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
		for i, s := range c.steps {
			d := f.decide(start.Add(s.at))
			if d.status != s.status || d.retryAfter != s.retry || d.backlog != s.backlog {
				t.Errorf("%s: step %d at %v: status %d, Retry-After %q, backlog %v; want %d, %q, %v",
					c.name, i, s.at, d.status, d.retryAfter, d.backlog, s.status, s.retry, s.backlog)
			}
		}
	}
}

// TestFakeWindowBound checks, on random arrivals, that the GCRA never
// allows more than ceil(W*Rate)+Tolerance calls in a window of length W
// (Shopify: BucketSize-1 in place of Tolerance), that it decides
// every call as a reference computed in float64 does, and that an overload
// does get the rate.
func TestFakeWindowBound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	cfgs := []Config{
		{Rate: 100, Tolerance: 2},
		{Rate: 100, Tolerance: -1},
		{Rate: 7, Tolerance: 3},
		{Rate: 1000},
		{Rate: 2, Mode: Shopify},
		{Rate: 50, Mode: Shopify, BucketSize: 5},
	}
	start := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, cfg := range cfgs {
		f := newFakeDecider(t, cfg)
		tol := f.cfg.Tolerance
		if cfg.Mode == Shopify {
			tol = f.cfg.BucketSize - 1
		}
		// The reference is the same GCRA in float64 nanoseconds (exact
		// here: every value is a whole number below 2^53).
		iv := float64(f.interval)
		var allowed []time.Time
		at := start
		var refTAT float64
		for i := 0; i < 20000; i++ {
			// Overload at about twice the rate, with an occasional pause
			// long enough to empty the bucket.
			if r.IntN(20) == 0 {
				at = at.Add(time.Duration(r.Float64() * float64(tol+2) * iv))
			} else {
				at = at.Add(time.Duration(r.Float64() * iv))
			}
			d := f.decide(at)
			x := float64(at.Sub(start))
			refOK := math.Max(refTAT, x)-x <= float64(tol)*iv
			if (d.status == http.StatusOK) != refOK {
				t.Fatalf("%+v: call %d at %v: status %d, the reference allows it: %v", cfg, i, at.Sub(start), d.status, refOK)
			}
			if refOK {
				allowed = append(allowed, at)
				refTAT = math.Max(refTAT, x) + iv
			}
		}
		for _, w := range []time.Duration{time.Second, 100 * time.Millisecond, 10 * time.Second} {
			bound := int(math.Ceil(w.Seconds()*cfg.Rate)) + tol
			if got := pacestat.MaxInWindow(allowed, w); got > bound {
				t.Errorf("%+v: %d allowed calls in a window of %v, bound %d", cfg, got, w, bound)
			}
		}
		// Without tolerance a call is allowed only when it is late, so the
		// allowed rate falls short of the quota; not by a quarter, though.
		if got := pacestat.MaxInWindow(allowed, time.Second); got < int(cfg.Rate*3/4) {
			t.Errorf("%+v: busiest second held %d calls; the overload should come near the rate", cfg, got)
		}
	}
}

func TestFakeHeaders(t *testing.T) {
	clock := newFakeTestClock()
	f := NewServer(Config{Rate: 100, Tolerance: 2, Headers: true, Clock: clock.Now})
	defer f.Close()
	steps := []struct {
		status           int
		remaining, reset string
		retry            string
	}{
		{200, "2", "1", ""}, // backlog 10ms: two more fit at once
		{200, "1", "1", ""},
		{200, "0", "1", ""},
		{429, "0", "1", "1"},
	}
	for i, s := range steps {
		a := fakeGet(t, f)
		fakeWant(t, fmt.Sprintf("call %d", i+1), a, s.status,
			"RateLimit-Policy", `"default";q=100;w=1`,
			"RateLimit", `"default";r=`+s.remaining+";t="+s.reset,
			"X-RateLimit-Limit", "100",
			"X-RateLimit-Remaining", s.remaining,
			"X-RateLimit-Reset", s.reset,
			"Retry-After", s.retry,
			"X-Shopify-Shop-Api-Call-Limit", "")
	}
	// At rest again the whole burst is available.
	clock.Advance(time.Second)
	fakeWant(t, "at rest", fakeGet(t, f), 200, "RateLimit", `"default";r=2;t=1`)

	// Without Headers there are none.
	g := NewServer(Config{Rate: 100, Clock: clock.Now})
	defer g.Close()
	fakeWant(t, "no headers", fakeGet(t, g), 200, "RateLimit-Policy", "", "RateLimit", "",
		"X-RateLimit-Limit", "", "X-RateLimit-Remaining", "", "X-RateLimit-Reset", "")
	// Unlimited has no quota to describe.
	u := NewServer(Config{Headers: true, Clock: clock.Now})
	defer u.Close()
	fakeWant(t, "unlimited", fakeGet(t, u), 200, "RateLimit-Policy", "", "RateLimit", "", "X-RateLimit-Limit", "")
}

func TestFakeHeadersFractionalRates(t *testing.T) {
	steps := []struct {
		cfg             Config
		policy, limit   string
		first           string // RateLimit after the first call
		firstRemaining  string
		firstResetAfter string
	}{
		{Config{Rate: 2.5, Tolerance: 1}, `"default";q=5;w=2`, "5", `"default";r=1;t=1`, "1", "1"},
		{Config{Rate: 0.5}, `"default";q=1;w=2`, "1", `"default";r=1;t=2`, "1", "2"}, // room 2, capped at q
		{Config{Rate: 1.0 / 3, Tolerance: -1}, `"default";q=1;w=3`, "1", `"default";r=0;t=3`, "0", "3"},
		{Config{Rate: 0.0001, Tolerance: -1}, `"default";q=1;w=10000`, "1", `"default";r=0;t=10000`, "0", "10000"},
		{Config{Rate: 1e9}, `"default";q=1000000000;w=1`, "1000000000", `"default";r=10000000;t=1`, "10000000", "1"},
	}
	for _, s := range steps {
		clock := newFakeTestClock()
		s.cfg.Headers, s.cfg.Clock = true, clock.Now
		f := NewServer(s.cfg)
		fakeWant(t, fmt.Sprintf("rate %v", s.cfg.Rate), fakeGet(t, f), 200,
			"RateLimit-Policy", s.policy, "X-RateLimit-Limit", s.limit,
			"RateLimit", s.first, "X-RateLimit-Remaining", s.firstRemaining, "X-RateLimit-Reset", s.firstResetAfter)
		f.Close()
	}
}

func TestFakeShopify(t *testing.T) {
	clock := newFakeTestClock()
	f := NewServer(Config{Rate: 2, Mode: Shopify, Clock: clock.Now})
	defer f.Close()
	for i := 1; i <= 40; i++ {
		fakeWant(t, fmt.Sprintf("call %d", i), fakeGet(t, f), 200,
			"X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/40", i), "Retry-After", "", "RateLimit", "")
	}
	a := fakeGet(t, f)
	fakeWant(t, "call 41", a, 429, "X-Shopify-Shop-Api-Call-Limit", "40/40", "Retry-After", "2.0")
	if !strings.Contains(a.body, "Exceeded 2 calls per second") {
		t.Errorf("429 body %s", a.body)
	}
	// Half a second leaks one call.
	clock.Advance(500 * time.Millisecond)
	fakeWant(t, "after one leak", fakeGet(t, f), 200, "X-Shopify-Shop-Api-Call-Limit", "40/40")
	clock.Advance(250 * time.Millisecond)
	fakeWant(t, "half a leak", fakeGet(t, f), 429, "X-Shopify-Shop-Api-Call-Limit", "40/40", "Retry-After", "2.0")
	clock.Advance(250 * time.Millisecond)
	fakeWant(t, "a whole leak", fakeGet(t, f), 200, "X-Shopify-Shop-Api-Call-Limit", "40/40")
	// Twenty seconds and a half empty the bucket.
	clock.Advance(20500 * time.Millisecond)
	fakeWant(t, "empty", fakeGet(t, f), 200, "X-Shopify-Shop-Api-Call-Limit", "1/40")
	// A partly leaked call counts as used.
	clock.Advance(250 * time.Millisecond)
	fakeWant(t, "partly leaked", fakeGet(t, f), 200, "X-Shopify-Shop-Api-Call-Limit", "2/40")
	if c := f.Counts(); c.Total != 46 || c.OK != 44 || c.Limited != 2 {
		t.Errorf("counts %+v", c)
	}
}

func TestFakeShopifyHeaders(t *testing.T) {
	clock := newFakeTestClock()
	f := NewServer(Config{Rate: 2, Mode: Shopify, BucketSize: 4, Headers: true, Clock: clock.Now})
	defer f.Close()
	for i := 1; i <= 4; i++ {
		fakeWant(t, fmt.Sprintf("call %d", i), fakeGet(t, f), 200,
			"X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/4", i),
			"RateLimit-Policy", `"default";q=4;w=2`,
			"RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, 4-i, (i+1)/2),
			"X-RateLimit-Remaining", fmt.Sprint(4-i))
	}
	fakeWant(t, "full", fakeGet(t, f), 429, "X-Shopify-Shop-Api-Call-Limit", "4/4",
		"RateLimit", `"default";r=0;t=2`, "Retry-After", "2.0")
}

func TestFakeFaults(t *testing.T) {
	clock := newFakeTestClock()
	clock.Advance(250 * time.Millisecond) // 12:00:00.25
	f := NewServer(Config{Rate: 100, Tolerance: 2, Headers: true, Clock: clock.Now})
	defer f.Close()
	noQuota := []string{"RateLimit-Policy", "", "RateLimit", "", "X-RateLimit-Limit", "", "X-RateLimit-Remaining", "", "X-RateLimit-Reset", ""}
	steps := []struct {
		fault   Fault
		status  int
		retry   string
		body    string
		noQuota bool
	}{
		{Fault429Seconds(3), 429, "3", fakeBodyLimited, true},
		{Fault429Seconds(0), 429, "0", fakeBodyLimited, true},
		{Fault429Seconds(-5), 429, "0", fakeBodyLimited, true},
		{Fault{Kind: FaultKind429Seconds, RetryAfter: 1500 * time.Millisecond}, 429, "2", fakeBodyLimited, true},
		// 12:00:00.25 + 2s = 12:00:02.25, rounded up to 12:00:03.
		{Fault429Date(2 * time.Second), 429, "Sun, 01 Jun 2025 12:00:03 GMT", fakeBodyLimited, true},
		{Fault429Date(1750 * time.Millisecond), 429, "Sun, 01 Jun 2025 12:00:02 GMT", fakeBodyLimited, true},
		{Fault429Date(0), 429, "Sun, 01 Jun 2025 12:00:01 GMT", fakeBodyLimited, true},
		{Fault429NoHeader, 429, "", fakeBodyLimited, true},
		{Fault503(5), 503, "5", fakeBodyUnavailable, true},
		{Fault503(0), 503, "", fakeBodyUnavailable, true},
		{FaultNone, 200, "", fakeBodyOK, false},
	}
	for _, s := range steps {
		f.SetFault(s.fault)
		a := fakeGet(t, f)
		what := fmt.Sprintf("%v %v", s.fault.Kind, s.fault.RetryAfter)
		fakeWant(t, what, a, s.status, "Retry-After", s.retry, "Content-Type", "application/json")
		if a.body != s.body {
			t.Errorf("%s: body %s, want %s", what, a.body, s.body)
		}
		if s.noQuota {
			fakeWant(t, what, a, s.status, noQuota...)
		} else {
			fakeWant(t, what, a, s.status, "RateLimit", `"default";r=2;t=1`)
		}
	}
	// The faulted calls consumed no quota: the FaultNone call above was
	// the first of a fresh burst of three.
	fakeWant(t, "second of the burst", fakeGet(t, f), 200)
	fakeWant(t, "third of the burst", fakeGet(t, f), 200)
	fakeWant(t, "above the burst", fakeGet(t, f), 429)
	c := f.Counts()
	want := Counts{Total: 14, OK: 3, Limited: 9, ByStatus: map[int]int{200: 3, 429: 9, 503: 2}, MaxInFlight: 1}
	if !fakeCountsEqual(c, want) {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}

func TestFakeFault429DateOnRealClock(t *testing.T) {
	f := NewServer(Config{})
	defer f.Close()
	f.SetFault(Fault429Date(3 * time.Second))
	before := time.Now()
	a := fakeGet(t, f)
	if a.status != 429 {
		t.Fatalf("status %d", a.status)
	}
	at, err := http.ParseTime(a.header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", a.header.Get("Retry-After"), err)
	}
	if d := at.Sub(before); d < 3*time.Second || d > 5*time.Second {
		t.Errorf("Retry-After is %v ahead, want [3s, 5s]", d)
	}
}

func TestFakeMaxConcurrent(t *testing.T) {
	f := NewServer(Config{MaxConcurrent: 2, Latency: time.Hour, Headers: true})
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL()+"/slow", nil)
			if resp, err := f.Client().Do(req); err == nil {
				resp.Body.Close()
				t.Error("a call held by Latency was answered")
			}
		}()
	}
	fakeEventually(t, "two calls in flight", func() bool { return f.Counts().InFlight == 2 })
	a := fakeGet(t, f)
	fakeWant(t, "third call", a, 429, "Retry-After", "1", "RateLimit", "")
	if a.body != fakeBodyConcurrency {
		t.Errorf("body %s", a.body)
	}
	cancel() // the clients give up: Latency must let go
	wg.Wait()
	fakeEventually(t, "no call in flight", func() bool { return f.Counts().InFlight == 0 })
	c := f.Counts()
	want := Counts{Total: 3, OK: 2, Limited: 1, ByStatus: map[int]int{200: 2, 429: 1}, MaxInFlight: 3}
	if !fakeCountsEqual(c, want) {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}

// TestFakeMaxConcurrentSequential: a client that never has more than
// MaxConcurrent calls out is never refused, even when each new call leaves
// the moment the previous answer arrives.
func TestFakeMaxConcurrentSequential(t *testing.T) {
	f := NewServer(Config{MaxConcurrent: 1})
	defer f.Close()
	for i := 0; i < 200; i++ {
		if a := fakeGet(t, f); a.status != 200 {
			t.Fatalf("call %d: %d", i, a.status)
		}
	}
	if c := f.Counts(); c.MaxInFlight != 1 {
		t.Errorf("MaxInFlight %d, want 1", c.MaxInFlight)
	}
}

// TestFakeLatency: an allowed call is answered after the Latency, a
// refusal at once. The Latency is long enough that a busy machine, which
// only makes answers late, cannot make a refusal look held for it.
func TestFakeLatency(t *testing.T) {
	const latency = 2 * time.Second
	f := NewServer(Config{Latency: latency, Rate: 100, Tolerance: -1})
	defer f.Close()
	start := time.Now()
	fakeWant(t, "allowed", fakeGet(t, f), 200)
	if d := time.Since(start); d < latency {
		t.Errorf("answered after %v, Latency is %v", d, latency)
	}
	// A refusal is immediate.
	f.SetFault(Fault429NoHeader)
	start = time.Now()
	fakeWant(t, "refused", fakeGet(t, f), 429)
	if d := time.Since(start); d >= latency/2 {
		t.Errorf("a refusal took %v; the Latency of %v is for allowed calls", d, latency)
	}
}

func TestFakeCloseReleasesHungCalls(t *testing.T) {
	for _, cfg := range []Config{{}, {Latency: time.Hour}} {
		f := NewServer(cfg)
		if cfg.Latency == 0 {
			f.SetFault(FaultHang)
		}
		errs := make(chan error, 3)
		for i := 0; i < 3; i++ {
			go func() {
				resp, err := http.Get(f.URL() + "/hang") // no timeout: only Close can end it
				if err == nil {
					resp.Body.Close()
					err = fmt.Errorf("answered %d", resp.StatusCode)
				}
				errs <- err
			}()
		}
		fakeEventually(t, "three calls in flight", func() bool { return f.Counts().InFlight == 3 })
		closed := make(chan struct{})
		go func() { f.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("%+v: Close did not return within 5s", cfg)
		}
		for i := 0; i < 3; i++ {
			select {
			case err := <-errs:
				if err == nil || strings.HasPrefix(err.Error(), "answered") {
					t.Errorf("%+v: a held call ended with %v, want a transport error", cfg, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%+v: a held call was not released", cfg)
			}
		}
		c := f.Counts()
		if c.InFlight != 0 || c.Total != 3 {
			t.Errorf("%+v: counts after Close %+v", cfg, c)
		}
		if cfg.Latency == 0 && (c.Hung != 3 || len(c.ByStatus) != 0) {
			t.Errorf("%+v: hung calls counted as %+v", cfg, c)
		}
		f.Close() // again: a no-op
	}
}

func TestFakeHangReleasedWhenClientGivesUp(t *testing.T) {
	f := NewServer(Config{})
	defer f.Close()
	f.SetFault(FaultHang)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL(), nil)
	if resp, err := f.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a hung call was answered")
	}
	fakeEventually(t, "the hung call to end", func() bool { return f.Counts().InFlight == 0 })
	f.SetFault(FaultNone)
	fakeWant(t, "after the fault", fakeGet(t, f), 200)
}

func TestFakeArrivalsUnderLoad(t *testing.T) {
	f := NewServer(Config{Rate: 2000})
	defer f.Close()
	const workers, each = 32, 30
	begin := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				resp, err := f.Client().Post(f.URL()+fmt.Sprintf("/w%d/%d", w, i), "application/json", strings.NewReader(`{"n":1}`))
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	a := f.Arrivals()
	if len(a) != workers*each {
		t.Fatalf("%d arrivals, want %d", len(a), workers*each)
	}
	if !slices.IsSortedFunc(a, time.Time.Compare) {
		t.Error("arrivals are not sorted")
	}
	if a[0].Before(begin) || a[len(a)-1].After(end) {
		t.Errorf("arrivals span [%v, %v], outside the run", a[0].Sub(begin), a[len(a)-1].Sub(begin))
	}
	c := f.Counts()
	if c.Total != workers*each || c.OK+c.Limited != c.Total || c.ByStatus[200] != c.OK || c.ByStatus[429] != c.Limited {
		t.Errorf("counts %+v", c)
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > workers || c.InFlight != 0 {
		t.Errorf("in flight %d, max %d", c.InFlight, c.MaxInFlight)
	}
	// Arrivals is a copy.
	a[0] = time.Time{}
	if f.Arrivals()[0].IsZero() {
		t.Error("Arrivals shares its slice")
	}
	f.Reset()
	if got := f.Arrivals(); got == nil || len(got) != 0 {
		t.Errorf("after Reset, arrivals %v", got)
	}
	if c := f.Counts(); !fakeCountsEqual(c, Counts{ByStatus: map[int]int{}}) {
		t.Errorf("after Reset, counts %+v", c)
	}
}

func TestFakeResetKeepsQuota(t *testing.T) {
	clock := newFakeTestClock()
	f := NewServer(Config{Rate: 100, Tolerance: 2, Clock: clock.Now})
	defer f.Close()
	for i := 0; i < 3; i++ {
		fakeGet(t, f)
	}
	f.Reset()
	fakeWant(t, "after Reset", fakeGet(t, f), 429)
	if c := f.Counts(); c.Total != 1 || c.Limited != 1 {
		t.Errorf("counts %+v", c)
	}
	f.SetFault(Fault503(1))
	f.Reset()
	fakeWant(t, "the fault survives Reset", fakeGet(t, f), 503)
}

func TestFakeAcceptsAnyCall(t *testing.T) {
	f := NewServer(Config{})
	defer f.Close()
	u, err := url.Parse(f.URL())
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		t.Fatalf("URL %s is not on a loopback address", f.URL())
	}
	big := strings.Repeat("x", 1<<20)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/", ""},
		{http.MethodPost, "/admin/api/2024-01/orders.json", big},
		{http.MethodPut, "/v1/charges/ch_1?expand=true", `{"a":1}`},
		{http.MethodDelete, "/x", ""},
		{http.MethodPatch, "/deep/path/", "{}"},
	} {
		a := fakeDo(t, f, c.method, c.path, c.body)
		fakeWant(t, c.method+" "+c.path, a, 200, "Content-Type", "application/json")
		if a.body != `{"ok":true}` {
			t.Errorf("%s %s: body %s", c.method, c.path, a.body)
		}
	}
	resp, err := f.Client().Head(f.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("HEAD: %d", resp.StatusCode)
	}
	if got := f.Counts().Total; got != 6 {
		t.Errorf("Total %d, want 6", got)
	}
}

func TestFakeConfigDefaults(t *testing.T) {
	steps := []struct {
		cfg       Config
		tolerance int
		bucket    int
	}{
		{Config{Rate: 100}, 2, 40},
		{Config{Rate: 250}, 2, 40},
		{Config{Rate: 399}, 3, 40},
		{Config{Rate: 1000}, 10, 40},
		{Config{Rate: 1000, Tolerance: 1}, 1, 40},
		{Config{Rate: 1000, Tolerance: -3}, 0, 40},
		{Config{Rate: 2, Mode: Shopify, BucketSize: 80}, 2, 80},
		{Config{}, 2, 40},
	}
	for _, s := range steps {
		f := newFakeDecider(t, s.cfg)
		if f.cfg.Tolerance != s.tolerance || f.cfg.BucketSize != s.bucket {
			t.Errorf("%+v: tolerance %d, bucket %d; want %d, %d", s.cfg, f.cfg.Tolerance, f.cfg.BucketSize, s.tolerance, s.bucket)
		}
	}
}

func TestFakeConfigInvalid(t *testing.T) {
	bad := []Config{
		{Rate: -1},
		{Rate: math.NaN()},
		{Rate: math.Inf(1)},
		{Rate: 1e-7},
		{Rate: 2e9},
		{BucketSize: -1},
		{MaxConcurrent: -1},
		{Latency: -time.Second},
		{Mode: Mode(7)},
		{Rate: 1e-6, Tolerance: math.MaxInt},
	}
	for _, cfg := range bad {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v: NewServer did not panic", cfg)
				}
			}()
			f := NewServer(cfg)
			f.Close()
		}()
	}
}

func TestFakeNames(t *testing.T) {
	for v, want := range map[fmt.Stringer]string{
		Strict: "strict", Shopify: "shopify", Mode(9): "Mode(9)",
		FaultKindNone: "none", FaultKind429Seconds: "429-seconds", FaultKind429Date: "429-date",
		FaultKind429NoHeader: "429-no-header", FaultKind503: "503", FaultKindHang: "hang", FaultKind(9): "FaultKind(9)",
	} {
		if got := v.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", v, got, want)
		}
	}
}
