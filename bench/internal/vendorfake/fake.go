// Package vendorfake holds fake third-party APIs that answer as the real
// ones document: OpenAI's and Anthropic's token quotas, Shopify's shared
// leaky bucket, Stripe's rate and concurrency limiters, and a set of
// webhook receivers of which some are slow or down. Each is an
// http.Handler that bench/cmd/realapi serves in a process of its own.
//
// Every fake decides a call when it arrives, by rules written against a
// clock the caller passes (so that tests can step it), records the
// arrival, answers after a latency drawn from a Latency, and reports its
// figures on GET /stats (Stats) and every arrival on GET /arrivals.
package vendorfake

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Latency is a distribution of answer times: uniform in [Min, Max], and
// with probability TailShare Tail instead (a slow call now and then).
type Latency struct {
	Min, Max  time.Duration
	TailShare float64
	Tail      time.Duration
}

// ParseLatency reads "40ms" (always 40 ms), "20ms-60ms" (uniform) or
// either followed by ",1%:2s" (one call in a hundred takes 2 s).
func ParseLatency(s string) (Latency, error) {
	var l Latency
	body, tail, hasTail := strings.Cut(strings.TrimSpace(s), ",")
	lo, hi, isRange := strings.Cut(body, "-")
	var err error
	if l.Min, err = time.ParseDuration(lo); err != nil {
		return l, fmt.Errorf("latency %q: %v", s, err)
	}
	l.Max = l.Min
	if isRange {
		if l.Max, err = time.ParseDuration(hi); err != nil {
			return l, fmt.Errorf("latency %q: %v", s, err)
		}
	}
	if l.Min < 0 || l.Max < l.Min {
		return l, fmt.Errorf("latency %q: want 0 <= min <= max", s)
	}
	if hasTail {
		p, d, ok := strings.Cut(tail, ":")
		share, perr := strconv.ParseFloat(strings.TrimSuffix(p, "%"), 64)
		if !ok || perr != nil || !strings.HasSuffix(p, "%") || share < 0 || share > 100 {
			return l, fmt.Errorf("latency %q: the tail is written 1%%:2s", s)
		}
		l.TailShare = share / 100
		if l.Tail, err = time.ParseDuration(d); err != nil || l.Tail < 0 {
			return l, fmt.Errorf("latency %q: the tail is written 1%%:2s", s)
		}
	}
	return l, nil
}

// String writes l as ParseLatency reads it.
func (l Latency) String() string {
	s := l.Min.String()
	if l.Max != l.Min {
		s += "-" + l.Max.String()
	}
	if l.TailShare > 0 {
		s += fmt.Sprintf(",%g%%:%v", 100*l.TailShare, l.Tail)
	}
	return s
}

// Mean is the average answer time.
func (l Latency) Mean() time.Duration {
	body := float64(l.Min+l.Max) / 2
	return time.Duration((1-l.TailShare)*body + l.TailShare*float64(l.Tail))
}

// Draw is one answer time.
func (l Latency) Draw(r *rand.Rand) time.Duration {
	if l.TailShare > 0 && r.Float64() < l.TailShare {
		return l.Tail
	}
	if l.Max == l.Min {
		return l.Min
	}
	return l.Min + time.Duration(r.Int64N(int64(l.Max-l.Min)+1))
}

// Arrival is one call a fake recorded.
type Arrival struct {
	At     int64  `json:"at_us"`            // arrival, Unix µs
	Key    string `json:"key,omitempty"`    // the store or customer called
	Path   string `json:"path"`             // the request's path
	Status int    `json:"status"`           // the answer's status
	Reason string `json:"reason,omitempty"` // why it was refused: requests, tokens, rate, concurrency, overloaded
	Tokens int64  `json:"tokens,omitempty"` // tokens charged: prompt (input) and completion (output)
	Output int64  `json:"output,omitempty"` // of Tokens, the completion's (output tokens)
	Idem   string `json:"idem,omitempty"`   // the Idempotency-Key it carried
}

// Stats are a fake's figures since it started.
type Stats struct {
	Vendor string `json:"vendor"`
	// Calls is every call that arrived; OK those admitted (2xx).
	Calls int `json:"calls"`
	OK    int `json:"ok"`
	// Refused counts refusals by reason (requests, tokens, rate,
	// concurrency, overloaded).
	Refused map[string]int `json:"refused"`
	// Tokens are the tokens charged for admitted calls.
	Tokens int64 `json:"tokens,omitempty"`
	// Open is the calls being answered now; Peak the most at once.
	Open int `json:"open"`
	Peak int `json:"peak"`
	// Other is the built-in other client of a shared quota (Shopify).
	Other *OtherStats `json:"other,omitempty"`
}

// OtherStats are what the other client of a shared quota tried and was
// refused.
type OtherStats struct {
	Calls   int `json:"calls"`
	Refused int `json:"refused"`
}

// Refusals is the sum of Refused.
func (s Stats) Refusals() int {
	n := 0
	for _, v := range s.Refused {
		n += v
	}
	return n
}

// record keeps a fake's arrivals and figures; its methods are safe for
// concurrent use.
type record struct {
	vendor string

	mu       sync.Mutex
	arrivals []Arrival
	stats    Stats
	lat      Latency
	rnd      *rand.Rand
}

func newRecord(vendor string, lat Latency, seed uint64) *record {
	return &record{vendor: vendor, lat: lat, rnd: rand.New(rand.NewPCG(seed, 0x5eed)),
		stats: Stats{Vendor: vendor, Refused: map[string]int{}}}
}

// add records a. For an admitted call it counts the call as open and
// returns its answer time; the caller calls done once it has answered.
func (r *record) add(a Arrival) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrivals = append(r.arrivals, a)
	r.stats.Calls++
	if a.Reason != "" {
		r.stats.Refused[a.Reason]++
		return 0
	}
	r.stats.OK++
	r.stats.Tokens += a.Tokens
	r.stats.Open++
	r.stats.Peak = max(r.stats.Peak, r.stats.Open)
	return r.lat.Draw(r.rnd)
}

func (r *record) done() {
	r.mu.Lock()
	r.stats.Open--
	r.mu.Unlock()
}

func (r *record) snapshot() (Stats, []Arrival) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Refused = make(map[string]int, len(r.stats.Refused))
	for k, v := range r.stats.Refused {
		s.Refused[k] = v
	}
	return s, append([]Arrival(nil), r.arrivals...)
}

// serveRecord answers GET /stats and GET /arrivals, and reports whether
// it did.
func serveRecord(w http.ResponseWriter, req *http.Request, stats func() Stats, r *record) bool {
	var v any
	switch req.URL.Path {
	case "/stats":
		v = stats()
	case "/arrivals":
		_, v = r.snapshot()
	default:
		return false
	}
	writeJSON(w, http.StatusOK, v)
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// sleep waits d or until the client has gone.
func sleep(req *http.Request, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-req.Context().Done():
	}
}

// bucket is a token bucket refilled continuously: Capacity units, full
// again Period after it was empty. LLM APIs' per-minute limits and
// Stripe's rate limiter work this way.
type bucket struct {
	capacity float64
	perSec   float64 // units refilled a second
	level    float64 // units available at at
	at       time.Time
}

func newBucket(capacity float64, period time.Duration, start float64, now time.Time) *bucket {
	return &bucket{capacity: capacity, perSec: capacity / period.Seconds(), level: math.Min(start, capacity), at: now}
}

// avail is the units available at now.
func (b *bucket) avail(now time.Time) float64 {
	if now.After(b.at) {
		b.level = math.Min(b.capacity, b.level+now.Sub(b.at).Seconds()*b.perSec)
		b.at = now
	}
	return b.level
}

// take takes n units if they are there at now.
func (b *bucket) take(now time.Time, n float64) bool {
	if b.avail(now) < n {
		return false
	}
	b.level -= n
	return true
}

// untilFull is the time until the bucket is full again, read at now.
func (b *bucket) untilFull(now time.Time) time.Duration {
	return secs((b.capacity - b.avail(now)) / b.perSec)
}

// until is the time until n units are available, read at now.
func (b *bucket) until(now time.Time, n float64) time.Duration {
	return secs(math.Max(0, n-b.avail(now)) / b.perSec)
}

func secs(s float64) time.Duration { return time.Duration(math.Ceil(s*1000)) * time.Millisecond }
