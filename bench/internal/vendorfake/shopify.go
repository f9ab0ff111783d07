package vendorfake

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ShopifyConfig is the shared quota of a Shopify-style REST Admin API.
type ShopifyConfig struct {
	// Rate is the leak, requests a second (Shopify's standard plan: 2);
	// Bucket the bucket's size (40).
	Rate   float64
	Bucket int
	// Stores are the stores the other client calls ("store-0" ...).
	Stores int
	// OtherShare is the share of each store's rate the other client of
	// the quota takes (the app's own interactive calls), in bursts of
	// OtherBurst calls at once; 0 for no other client.
	OtherShare float64
	OtherBurst int
	// Latency is the answer time of an admitted call.
	Latency Latency
	// Seed fixes the other client's phases and the latencies.
	Seed uint64
}

// Shopify is a Shopify-style REST Admin API: a leaky bucket per store
// (the first segment of the path: /<store>/admin/api/...), Bucket
// requests deep, leaking Rate a second, shared by every client of the
// store. Every answer carries X-Shopify-Shop-Api-Call-Limit: used/Bucket;
// a call that would overflow the bucket is answered 429 with
// Retry-After: 2.0 and Shopify's body.
//
// The built-in other client takes OtherShare of each store's rate: every
// OtherBurst/(OtherShare×Rate) seconds, at a phase of its own per store,
// OtherBurst calls at once straight into the bucket, counting those the
// bucket refuses (Stats.Other).
type Shopify struct {
	cfg ShopifyConfig
	rec *record
	now func() time.Time

	mu     sync.Mutex
	stores map[string]*leaky
	next   []time.Time // the other client's next burst, per store
	other  OtherStats
}

// leaky is one store's bucket: its level (calls in it) at at.
type leaky struct {
	level float64
	at    time.Time
}

// NewShopify returns the fake at now, its buckets empty.
func NewShopify(cfg ShopifyConfig, now time.Time) *Shopify {
	s := &Shopify{cfg: cfg, rec: newRecord("shopify", cfg.Latency, cfg.Seed), now: time.Now, stores: map[string]*leaky{}}
	if cfg.OtherShare > 0 && cfg.OtherBurst > 0 {
		r := rand.New(rand.NewPCG(cfg.Seed, 0x07e4))
		period := s.otherPeriod()
		for range cfg.Stores {
			s.next = append(s.next, now.Add(time.Duration(r.Float64()*float64(period))))
		}
	}
	return s
}

// otherPeriod is the time between two of the other client's bursts at one
// store.
func (s *Shopify) otherPeriod() time.Duration {
	return time.Duration(float64(s.cfg.OtherBurst) / (s.cfg.OtherShare * s.cfg.Rate) * float64(time.Second))
}

// take puts a call into store's bucket at now if it fits, and returns the
// level after.
func (s *Shopify) take(store string, now time.Time) (bool, int) {
	b := s.stores[store]
	if b == nil {
		b = &leaky{at: now}
		s.stores[store] = b
	}
	if now.After(b.at) {
		b.level = math.Max(0, b.level-now.Sub(b.at).Seconds()*s.cfg.Rate)
		b.at = now
	}
	if b.level+1 > float64(s.cfg.Bucket)+1e-9 {
		return false, s.cfg.Bucket
	}
	b.level++
	return true, int(math.Ceil(b.level - 1e-9))
}

// OtherTick fires the other client's bursts that are due at now.
func (s *Shopify) OtherTick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	period := s.otherPeriod()
	for i := range s.next {
		for !s.next[i].After(now) {
			store := fmt.Sprintf("store-%d", i)
			for range s.cfg.OtherBurst {
				s.other.Calls++
				if ok, _ := s.take(store, s.next[i]); !ok {
					s.other.Refused++
				}
			}
			s.next[i] = s.next[i].Add(period)
		}
	}
}

// RunOther runs the other client every 20 ms until stop is closed.
func (s *Shopify) RunOther(stop <-chan struct{}) {
	if len(s.next) == 0 {
		return
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.OtherTick(s.now())
		}
	}
}

// Stats are the fake's figures.
func (s *Shopify) Stats() Stats {
	st, _ := s.rec.snapshot()
	s.mu.Lock()
	o := s.other
	s.mu.Unlock()
	st.Other = &o
	return st
}

func (s *Shopify) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if serveRecord(w, req, s.Stats, s.rec) {
		return
	}
	store, _, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	now := s.now()
	s.mu.Lock()
	ok, used := s.take(store, now)
	s.mu.Unlock()
	w.Header().Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", used, s.cfg.Bucket))
	a := Arrival{At: now.UnixMicro(), Key: store, Path: req.URL.Path, Status: http.StatusOK, Idem: req.Header.Get("Idempotency-Key")}
	if !ok {
		a.Status, a.Reason = http.StatusTooManyRequests, "rate"
		s.rec.add(a)
		w.Header().Set("Retry-After", "2.0")
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"errors": fmt.Sprintf("Exceeded %g calls per second for api client. Reduce request rates to resume uninterrupted service.", s.cfg.Rate)})
		return
	}
	sleep(req, s.rec.add(a))
	s.rec.done()
	writeJSON(w, http.StatusOK, map[string]any{"orders": []any{}})
}
