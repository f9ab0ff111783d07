package vendorfake

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// StripeConfig is a Stripe-style API's pair of limiters.
type StripeConfig struct {
	// Rate is requests a second (live mode: 100), as a token bucket of
	// one second's requests.
	Rate int64
	// Concurrency is the most requests in flight at once.
	Concurrency int
	// Latency is the answer time of an admitted call (20ms-60ms).
	Latency Latency
	// Seed fixes the latencies.
	Seed uint64
}

// Stripe is a Stripe-style API with its rate limiter and its concurrency
// limiter, in that order (a request the rate limiter admits has spent its
// token even if the concurrency limiter then refuses it). A refusal is a
// 429 with Stripe's error body (code rate_limit) and
// Stripe-Rate-Limited-Reason: global-rate or global-concurrency.
type Stripe struct {
	cfg StripeConfig
	rec *record
	now func() time.Time

	mu   sync.Mutex
	rate *bucket
	open int
	seq  int
}

// NewStripe returns the fake at now, its rate bucket full.
func NewStripe(cfg StripeConfig, now time.Time) *Stripe {
	return &Stripe{cfg: cfg, rec: newRecord("stripe", cfg.Latency, cfg.Seed), now: time.Now,
		rate: newBucket(float64(cfg.Rate), time.Second, float64(cfg.Rate), now)}
}

// admit decides a request at now: "" (admitted, and counted in flight
// until release), "rate" or "concurrency".
func (s *Stripe) admit(now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	if !s.rate.take(now, 1) {
		return "rate"
	}
	if s.open >= s.cfg.Concurrency {
		return "concurrency"
	}
	s.open++
	return ""
}

func (s *Stripe) release() {
	s.mu.Lock()
	s.open--
	s.mu.Unlock()
}

// Stats are the fake's figures.
func (s *Stripe) Stats() Stats { st, _ := s.rec.snapshot(); return st }

func (s *Stripe) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if serveRecord(w, req, s.Stats, s.rec) {
		return
	}
	now := s.now()
	reason := s.admit(now)
	s.mu.Lock()
	seq := s.seq
	s.mu.Unlock()
	w.Header().Set("Request-Id", fmt.Sprintf("req_%014d", seq))
	a := Arrival{At: now.UnixMicro(), Path: req.URL.Path, Status: http.StatusOK, Reason: reason, Idem: req.Header.Get("Idempotency-Key")}
	if reason != "" {
		a.Status = http.StatusTooManyRequests
		s.rec.add(a)
		w.Header().Set("Stripe-Rate-Limited-Reason", "global-"+reason)
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
			"code": "rate_limit", "doc_url": "https://stripe.com/docs/error-codes/rate-limit", "type": "invalid_request_error",
			"message": "Too many requests hit the API too quickly. We recommend an exponential backoff of your requests."}})
		return
	}
	sleep(req, s.rec.add(a))
	s.rec.done()
	s.release()
	writeJSON(w, http.StatusOK, map[string]any{"id": fmt.Sprintf("ch_%014d", seq), "object": "charge", "amount": 100, "currency": "usd", "status": "succeeded"})
}
