package downstream

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"time"
)

// FakeMode is how a FakeServer enforces its quota.
type FakeMode int

const (
	// FakeStrict enforces Rate as a GCRA with a tolerance of Tolerance
	// calls: a call earlier than its theoretical arrival time minus the
	// tolerance gets 429.
	FakeStrict FakeMode = iota
	// FakeShopify enforces a leaky bucket of BucketSize calls that leaks
	// Rate per second, answers with X-Shopify-Shop-Api-Call-Limit
	// ("used/size"), and 429 with "Retry-After: 2.0" when full, like
	// Shopify's REST Admin API.
	FakeShopify
)

// FakeConfig configures a FakeServer.
type FakeConfig struct {
	// Rate is the quota in calls per second; 0 is unlimited.
	Rate float64
	// Tolerance is FakeStrict's burst tolerance in calls; default 1% of
	// one second's quota, at least 2.
	Tolerance int
	// Mode chooses the enforcement; default FakeStrict.
	Mode FakeMode
	// BucketSize is FakeShopify's bucket; default 40.
	BucketSize int
	// Latency is added before each answer (simulated work).
	Latency time.Duration
	// MaxConcurrent, when positive, answers 429 to a call that would make
	// more calls in flight.
	MaxConcurrent int
	// Headers adds RateLimit-Policy / RateLimit and X-RateLimit-* fields
	// to the answers (FakeStrict).
	Headers bool
}

// FaultKind is a scripted misbehaviour of a FakeServer.
type FaultKind int

// The faults.
const (
	FaultNone        FaultKind = iota
	Fault429Seconds            // 429 with Retry-After in seconds (Fault.After)
	Fault429Date               // 429 with Retry-After as an HTTP date Fault.After ahead
	Fault429NoHeader           // 429 with no Retry-After
	Fault503                   // 503 with Retry-After in seconds (Fault.After)
	FaultHang                  // no answer until the client gives up or Close
)

// Fault is a FakeServer's scripted misbehaviour, applied to every call
// until changed.
type Fault struct {
	Kind  FaultKind
	After time.Duration
}

// FakeCounts are what a FakeServer answered.
type FakeCounts struct {
	Total, OK, Limited int
	ByStatus           map[int]int
	MaxConcurrent      int
}

// FakeServer is a third-party API for tests, benchmarks and the demo, in
// the style of net/http/httptest: it listens on a loopback port, enforces a
// quota exactly (decided under one lock at each call's arrival), and
// records the arrival time of every call.
type FakeServer struct {
	cfg  FakeConfig
	srv  *httptest.Server
	now  func() time.Time
	stop chan struct{}
	once sync.Once

	mu       sync.Mutex
	arrivals []time.Time
	counts   FakeCounts
	tat      time.Time // FakeStrict: theoretical arrival time
	level    float64   // FakeShopify: calls in the bucket at levelAt
	levelAt  time.Time
	fault    Fault
	inflight int
}

// NewFakeServer starts a FakeServer on 127.0.0.1.
func NewFakeServer(cfg FakeConfig) *FakeServer {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = max(2, int(math.Ceil(cfg.Rate/100)))
	}
	if cfg.BucketSize <= 0 {
		cfg.BucketSize = 40
	}
	f := &FakeServer{cfg: cfg, now: time.Now, stop: make(chan struct{}), arrivals: make([]time.Time, 0, 1<<14)}
	f.counts.ByStatus = map[int]int{}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("sluice: FakeServer: %v", err))
	}
	f.srv.Listener = ln
	f.srv.Start()
	return f
}

// URL returns the server's base URL, http://127.0.0.1:port.
func (f *FakeServer) URL() string { return f.srv.URL }

// Close releases hung calls and stops the server.
func (f *FakeServer) Close() {
	f.once.Do(func() { close(f.stop) })
	f.srv.CloseClientConnections()
	f.srv.Close()
}

// SetFault changes the server's behaviour for the calls that follow.
func (f *FakeServer) SetFault(fault Fault) {
	f.mu.Lock()
	f.fault = fault
	f.mu.Unlock()
}

// Arrivals returns the arrival time of every call, sorted.
func (f *FakeServer) Arrivals() []time.Time {
	f.mu.Lock()
	a := append([]time.Time(nil), f.arrivals...)
	f.mu.Unlock()
	sort.Slice(a, func(i, j int) bool { return a[i].Before(a[j]) })
	return a
}

// Counts returns what the server has answered.
func (f *FakeServer) Counts() FakeCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counts
	c.ByStatus = make(map[int]int, len(f.counts.ByStatus))
	for k, v := range f.counts.ByStatus {
		c.ByStatus[k] = v
	}
	return c
}

// Reset forgets the arrivals and counts (not the quota's state).
func (f *FakeServer) Reset() {
	f.mu.Lock()
	f.arrivals = f.arrivals[:0]
	f.counts = FakeCounts{ByStatus: map[int]int{}}
	f.mu.Unlock()
}

// admit decides one call at now; callers hold f.mu. It returns the status
// and the headers to send.
func (f *FakeServer) admit(now time.Time, h http.Header) int {
	switch f.fault.Kind {
	case Fault429Seconds:
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(f.fault.After.Seconds()))))
		return http.StatusTooManyRequests
	case Fault429Date:
		h.Set("Retry-After", now.Add(f.fault.After).UTC().Format(http.TimeFormat))
		return http.StatusTooManyRequests
	case Fault429NoHeader:
		return http.StatusTooManyRequests
	case Fault503:
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(f.fault.After.Seconds()))))
		return http.StatusServiceUnavailable
	}
	if f.cfg.MaxConcurrent > 0 && f.inflight > f.cfg.MaxConcurrent {
		h.Set("Retry-After", "1")
		return http.StatusTooManyRequests
	}
	if f.cfg.Rate <= 0 {
		return http.StatusOK
	}
	interval := time.Duration(float64(time.Second) / f.cfg.Rate)
	if f.cfg.Mode == FakeShopify {
		leaked := now.Sub(f.levelAt).Seconds() * f.cfg.Rate
		f.level = math.Max(0, f.level-leaked)
		f.levelAt = now
		if f.level+1 > float64(f.cfg.BucketSize) {
			h.Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", f.cfg.BucketSize, f.cfg.BucketSize))
			h.Set("Retry-After", "2.0")
			return http.StatusTooManyRequests
		}
		f.level++
		h.Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", int(math.Ceil(f.level)), f.cfg.BucketSize))
		return http.StatusOK
	}
	tat := f.tat
	if tat.Before(now) {
		tat = now
	}
	tolerance := time.Duration(f.cfg.Tolerance) * interval
	status := http.StatusOK
	if now.Before(tat.Add(-tolerance)) {
		status = http.StatusTooManyRequests
		wait := tat.Add(-tolerance).Sub(now)
		h.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
	} else {
		f.tat = tat.Add(interval)
	}
	if f.cfg.Headers {
		quota := int(math.Round(f.cfg.Rate))
		used := f.tat.Sub(now)
		remaining := max(0, f.cfg.Tolerance-int(math.Ceil(float64(used)/float64(interval)))+1)
		reset := int(math.Ceil(used.Seconds()))
		h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=1`, quota))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, remaining, reset))
		h.Set("X-RateLimit-Limit", strconv.Itoa(quota))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-RateLimit-Reset", strconv.Itoa(reset))
	}
	return status
}

func (f *FakeServer) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	f.mu.Lock()
	now := f.now()
	f.arrivals = append(f.arrivals, now)
	f.inflight++
	if f.inflight > f.counts.MaxConcurrent {
		f.counts.MaxConcurrent = f.inflight
	}
	hang := f.fault.Kind == FaultHang
	status := http.StatusOK
	if !hang {
		status = f.admit(now, w.Header())
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	if hang {
		select {
		case <-r.Context().Done():
		case <-f.stop:
		}
		return
	}
	if f.cfg.Latency > 0 {
		select {
		case <-time.After(f.cfg.Latency):
		case <-r.Context().Done():
		case <-f.stop:
		}
	}
	f.mu.Lock()
	f.counts.Total++
	f.counts.ByStatus[status]++
	switch {
	case status < 300:
		f.counts.OK++
	case status == http.StatusTooManyRequests:
		f.counts.Limited++
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status < 300 {
		io.WriteString(w, `{"ok":true}`)
	} else {
		io.WriteString(w, `{"error":"rate limited"}`)
	}
}
