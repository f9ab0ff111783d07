package downstreamtest

import (
	"context"
	"fmt"
	"io"
	"maps"
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
	resp, err := http.DefaultClient.Do(req)
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

// fakeDecide decides a call arriving at at without HTTP (and without
// recording it), as the handler does, and returns its status.
func fakeDecide(f *Server, at time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	status, _, _ := f.decide(at)
	return status
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
	if a.body != bodyLimited {
		t.Errorf("429 body %s", a.body)
	}
	// 5ms later it is still refused (a refusal consumed nothing, and did
	// not move the schedule either); 10ms later one more passes.
	clock.Advance(5 * time.Millisecond)
	fakeWant(t, "half an interval later", fakeGet(t, f), http.StatusTooManyRequests, "Retry-After", "1")
	clock.Advance(5 * time.Millisecond)
	fakeWant(t, "after one interval", fakeGet(t, f), http.StatusOK)
	fakeWant(t, "right after", fakeGet(t, f), http.StatusTooManyRequests, "Retry-After", "1")
	// At rest again the whole burst is available.
	clock.Advance(time.Second)
	for i := 1; i <= 3; i++ {
		fakeWant(t, fmt.Sprintf("at rest, call %d", i), fakeGet(t, f), http.StatusOK)
	}
	c := f.Counts()
	want := Counts{Total: 10, OK: 7, Limited: 3, ByStatus: map[int]int{200: 7, 429: 3}, MaxInFlight: 1}
	if !fakeCountsEqual(c, want) {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if got := len(f.Arrivals()); got != 10 {
		t.Errorf("%d arrivals, want 10", got)
	}
}

func fakeCountsEqual(a, b Counts) bool {
	return a.Total == b.Total && a.OK == b.OK && a.Limited == b.Limited &&
		a.InFlight == b.InFlight && a.MaxInFlight == b.MaxInFlight && maps.Equal(a.ByStatus, b.ByStatus)
}

// TestFakeBurstFromRest: Tolerance+1 calls pass at once from rest, with
// the default tolerance max(2, Rate/100).
func TestFakeBurstFromRest(t *testing.T) {
	for _, s := range []struct {
		cfg   Config
		burst int
	}{
		{Config{Rate: 100}, 3},
		{Config{Rate: 250}, 3},
		{Config{Rate: 399}, 4},
		{Config{Rate: 1000}, 11},
		{Config{Rate: 1000, Tolerance: 1}, 2},
		{Config{Rate: 1000, Tolerance: -3}, 1},
		{Config{}, 1000}, // unlimited
	} {
		clock := newFakeTestClock()
		s.cfg.Clock = clock.Now
		f := NewServer(s.cfg)
		for i := 0; i < s.burst; i++ {
			if got := fakeDecide(f, clock.Now()); got != http.StatusOK {
				t.Errorf("%+v: call %d: %d, want 200", s.cfg, i+1, got)
			}
		}
		if got := fakeDecide(f, clock.Now()); s.cfg.Rate > 0 && got != http.StatusTooManyRequests {
			t.Errorf("%+v: call %d: %d, want 429", s.cfg, s.burst+1, got)
		}
		f.Close()
	}
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
	// An interval that is not a whole number of microseconds (1/3 s) is
	// not rounded down: a call 333333µs after the last is early.
	clock := newFakeTestClock()
	f := NewServer(Config{Rate: 3, Tolerance: -1, Clock: clock.Now})
	defer f.Close()
	start := clock.Now()
	for _, s := range []struct {
		at   time.Duration
		want int
	}{{0, 200}, {333333 * time.Microsecond, 429}, {333334 * time.Microsecond, 200}, {666667 * time.Microsecond, 429}, {666668 * time.Microsecond, 200}} {
		if got := fakeDecide(f, start.Add(s.at)); got != s.want {
			t.Errorf("rate 3: call at %v got %d, want %d", s.at, got, s.want)
		}
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

// TestFakeWindowBound checks, on random arrivals at about twice the rate,
// that the server never allows more than ceil(W*Rate)+Tolerance calls in a
// window of length W, and that the overload does get the rate.
func TestFakeWindowBound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, s := range []struct {
		cfg Config
		tol int
	}{
		{Config{Rate: 100, Tolerance: 2}, 2},
		{Config{Rate: 100, Tolerance: -1}, 0},
		{Config{Rate: 7, Tolerance: 3}, 3},
		{Config{Rate: 1000}, 10},
	} {
		clock := newFakeTestClock()
		s.cfg.Clock = clock.Now
		f := NewServer(s.cfg)
		iv := time.Second / time.Duration(s.cfg.Rate)
		var allowed []time.Time
		at := clock.Now()
		for i := 0; i < 20000; i++ {
			// An occasional pause long enough to empty the bucket.
			if r.IntN(20) == 0 {
				at = at.Add(time.Duration(r.Int64N(int64(s.tol+2) * int64(iv))))
			} else {
				at = at.Add(time.Duration(r.Int64N(int64(iv))))
			}
			at = at.Truncate(time.Microsecond) // the server decides to the microsecond
			if fakeDecide(f, at) == http.StatusOK {
				allowed = append(allowed, at)
			}
		}
		f.Close()
		for _, w := range []time.Duration{time.Second, 100 * time.Millisecond, 10 * time.Second} {
			bound := int(math.Ceil(w.Seconds()*float64(s.cfg.Rate))) + s.tol
			if got := MaxInWindow(allowed, w); got > bound {
				t.Errorf("%+v: %d allowed calls in a window of %v, bound %d", s.cfg, got, w, bound)
			}
		}
		// Without tolerance a call is allowed only when it is late, so the
		// allowed rate falls short of the quota; not by a quarter, though.
		if got := MaxInWindow(allowed, time.Second); got < s.cfg.Rate*3/4 {
			t.Errorf("%+v: busiest second held %d calls; the overload should come near the rate", s.cfg, got)
		}
	}
}

func TestFakeFaults(t *testing.T) {
	clock := newFakeTestClock()
	clock.Advance(250 * time.Millisecond) // 12:00:00.25
	f := NewServer(Config{Rate: 100, Tolerance: 2, Clock: clock.Now})
	defer f.Close()
	steps := []struct {
		fault  Fault
		status int
		retry  string
		body   string
	}{
		{Fault429Seconds(3), 429, "3", bodyLimited},
		{Fault429Seconds(0), 429, "0", bodyLimited},
		{Fault429Seconds(-5), 429, "0", bodyLimited},
		// 12:00:00.25 + 2s = 12:00:02.25, rounded up to 12:00:03.
		{Fault429Date(2 * time.Second), 429, "Sun, 01 Jun 2025 12:00:03 GMT", bodyLimited},
		{Fault429Date(1750 * time.Millisecond), 429, "Sun, 01 Jun 2025 12:00:02 GMT", bodyLimited},
		{Fault429Date(0), 429, "Sun, 01 Jun 2025 12:00:01 GMT", bodyLimited},
		{Fault429NoHeader, 429, "", bodyLimited},
		{Fault503(5), 503, "5", bodyUnavailable},
		{Fault503(0), 503, "", bodyUnavailable},
		{FaultNone, 200, "", bodyOK},
	}
	for i, s := range steps {
		f.SetFault(s.fault)
		a := fakeGet(t, f)
		what := fmt.Sprintf("step %d: %+v", i, s.fault)
		fakeWant(t, what, a, s.status, "Retry-After", s.retry, "Content-Type", "application/json")
		if a.body != s.body {
			t.Errorf("%s: body %s, want %s", what, a.body, s.body)
		}
	}

	// The faulted calls consumed no quota: the FaultNone call above was
	// the first of a fresh burst of three.
	fakeWant(t, "second of the burst", fakeGet(t, f), 200)
	fakeWant(t, "third of the burst", fakeGet(t, f), 200)
	fakeWant(t, "above the burst", fakeGet(t, f), 429)
	c := f.Counts()
	want := Counts{Total: 13, OK: 3, Limited: 8, ByStatus: map[int]int{200: 3, 429: 8, 503: 2}, MaxInFlight: 1}
	if !fakeCountsEqual(c, want) {
		t.Errorf("counts %+v, want %+v", c, want)
	}
}

// TestFakeFault429DateOnRealClock: on the real clock, an HTTP-date
// Retry-After is the call's recorded arrival plus the delay, rounded up to
// the next whole second.
func TestFakeFault429DateOnRealClock(t *testing.T) {
	f := NewServer(Config{})
	defer f.Close()
	f.SetFault(Fault429Date(3 * time.Second))
	a := fakeGet(t, f)
	want := f.Arrivals()[0].Add(3*time.Second + time.Second - 1).Truncate(time.Second)
	fakeWant(t, "429", a, 429, "Retry-After", want.UTC().Format(http.TimeFormat))
}

func TestFakeMaxConcurrent(t *testing.T) {
	f := NewServer(Config{MaxConcurrent: 2, Latency: time.Hour})
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL()+"/slow", nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Error("a call held by Latency was answered")
			}
		}()
	}
	fakeEventually(t, "two calls in flight", func() bool { return f.Counts().InFlight == 2 })
	a := fakeGet(t, f)
	fakeWant(t, "third call", a, 429, "Retry-After", "1")
	if a.body != bodyConcurrency {
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
	// A refusal does not wait the Latency, which is for allowed calls:
	// with an hour of it, the refusal comes back at all only if it is
	// answered at once.
	slow := NewServer(Config{Latency: time.Hour, Rate: 100, Tolerance: -1})
	defer slow.Close()
	slow.SetFault(Fault429NoHeader)
	fakeWant(t, "refused", fakeGet(t, slow), 429)
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
		if cfg.Latency == 0 && len(c.ByStatus) != 0 {
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
	if resp, err := http.DefaultClient.Do(req); err == nil {
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
				resp, err := http.DefaultClient.Post(f.URL()+fmt.Sprintf("/w%d/%d", w, i), "application/json", strings.NewReader(`{"n":1}`))
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
	if a[0].Before(begin.Add(-time.Microsecond)) || a[len(a)-1].After(end) { // kept to the microsecond
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
	resp, err := http.DefaultClient.Head(f.URL())
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

func TestFakeConfigInvalid(t *testing.T) {
	bad := []Config{
		{Rate: -1},
		{MaxConcurrent: -1},
		{Latency: -time.Second},
		{Rate: 1 << 41},                   // above algorithms.MaxLimit
		{Rate: 1, Tolerance: math.MaxInt}, // a burst above algorithms.MaxLimit
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

func TestMaxInWindow(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	ms := func(offsets ...int) []time.Time {
		a := make([]time.Time, len(offsets))
		for i, o := range offsets {
			a[i] = t0.Add(time.Duration(o) * time.Millisecond)
		}
		return a
	}
	steps := []struct {
		name     string
		arrivals []time.Time
		window   time.Duration
		want     int
	}{
		{"nil", nil, time.Second, 0},
		{"empty", ms(), time.Second, 0},
		{"one", ms(0), time.Second, 1},
		{"zero window", ms(0, 0, 0), 0, 0},
		{"negative window", ms(0, 1), -time.Second, 0},
		{"same instant", ms(5, 5, 5, 5), time.Nanosecond, 4},
		{"exactly window apart never share", ms(0, 1000), time.Second, 1},
		{"one ns inside", []time.Time{t0, t0.Add(time.Second - 1)}, time.Second, 2},
		{"chain at the edge", ms(0, 1000, 2000, 3000), time.Second, 1},
		{"evenly spaced 10/s", ms(0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100), time.Second, 10},
		{"burst at the end", ms(0, 100, 900, 950, 999, 1000, 1001), time.Second, 6},
		{"window slides past the start", ms(0, 600, 700, 800, 1500, 1550), time.Second, 5},
		{"busiest window not at an edge", ms(0, 2000, 2100, 2200, 2999, 3000, 5000), time.Second, 4},
		{"small window", ms(0, 10, 20, 25, 30, 40), 10 * time.Millisecond, 2},
		{"repeats at the edge", ms(0, 0, 1000, 1000, 1000), time.Second, 3},
	}
	for _, s := range steps {
		if got := MaxInWindow(s.arrivals, s.window); got != s.want {
			t.Errorf("%s: MaxInWindow(%v) = %d, want %d", s.name, s.window, got, s.want)
		}
	}
	// On time.Now readings, which carry the monotonic clock.
	base := time.Now()
	a := []time.Time{base, base.Add(10 * time.Millisecond), base.Add(20 * time.Millisecond), base.Add(30 * time.Millisecond)}
	if got := MaxInWindow(a, 20*time.Millisecond); got != 2 {
		t.Errorf("MaxInWindow on monotonic readings = %d, want 2", got)
	}
	// Against every window that starts at an arrival (the busiest window
	// can always start at one).
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		a := make([]time.Time, r.IntN(60))
		for i := range a {
			a[i] = t0.Add(time.Duration(r.IntN(50)) * 10 * time.Millisecond)
		}
		slices.SortFunc(a, time.Time.Compare)
		window := time.Duration(r.IntN(30)+1) * 10 * time.Millisecond
		want := 0
		for _, start := range a {
			c := 0
			for _, x := range a {
				if !x.Before(start) && x.Before(start.Add(window)) {
					c++
				}
			}
			want = max(want, c)
		}
		if got := MaxInWindow(a, window); got != want {
			t.Fatalf("trial %d: MaxInWindow(%v, %v) = %d, want %d", trial, a, window, got, want)
		}
	}
}

// TestFakeConcurrencyReason: with ConcurrencyReason, a call over
// MaxConcurrent is refused as Stripe refuses it (no Retry-After, the
// reason named), and a call over the quota names the rate.
func TestFakeConcurrencyReason(t *testing.T) {
	f := NewServer(Config{Rate: 1, Tolerance: -1, MaxConcurrent: 1, Latency: time.Hour, ConcurrencyReason: "global-concurrency"})
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL()+"/slow", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	fakeEventually(t, "one call in flight", func() bool { return f.Counts().InFlight == 1 })
	fakeWant(t, "over the cap", fakeGet(t, f), 429, "Retry-After", "", "Stripe-Rate-Limited-Reason", "global-concurrency")
	cancel()
	<-done
	fakeEventually(t, "no call in flight", func() bool { return f.Counts().InFlight == 0 })
	fakeWant(t, "over the rate", fakeGet(t, f), 429, "Retry-After", "1", "Stripe-Rate-Limited-Reason", "global-rate")
}
