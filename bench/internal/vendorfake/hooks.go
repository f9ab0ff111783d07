package vendorfake

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// HooksConfig is a set of webhook receivers, one per customer.
type HooksConfig struct {
	// Healthy, Slow and Down are how many customers of each kind: a
	// healthy receiver answers after Latency, a slow one after
	// SlowLatency, and a down one refuses connections.
	Healthy, Slow, Down int
	Latency             Latency
	SlowLatency         Latency
	Seed                uint64
}

// Endpoint is one customer's receiver.
type Endpoint struct {
	Name string `json:"name"` // "healthy-01", "slow-01", "down-01"
	Kind string `json:"kind"` // healthy, slow, down
	URL  string `json:"url"`  // http://127.0.0.1:<port>
}

// Hooks is a set of webhook receivers, each customer on a loopback port
// of its own (so that a down one refuses connections as a dead host
// does, and no name is ever resolved). The control handler (Hooks
// itself) serves /stats, /arrivals (Key: the customer) and /endpoints.
type Hooks struct {
	cfg HooksConfig
	rec *record

	mu        sync.Mutex
	endpoints []Endpoint
	servers   []*http.Server
}

// NewHooks returns the receivers, not listening yet (Listen).
func NewHooks(cfg HooksConfig) *Hooks {
	return &Hooks{cfg: cfg, rec: newRecord("hooks", cfg.Latency, cfg.Seed)}
}

// names lists the customers: kind and name.
func (h *Hooks) names() []Endpoint {
	var out []Endpoint
	for _, k := range []struct {
		kind string
		n    int
	}{{"healthy", h.cfg.Healthy}, {"slow", h.cfg.Slow}, {"down", h.cfg.Down}} {
		for i := range k.n {
			out = append(out, Endpoint{Name: fmt.Sprintf("%s-%02d", k.kind, i+1), Kind: k.kind})
		}
	}
	return out
}

// Receiver is the handler of one customer's receiver: it records the
// call under the customer's name and answers 200 after the kind's
// latency.
func (h *Hooks) Receiver(name string, slow bool) http.Handler {
	lat := h.cfg.Latency
	if slow {
		lat = h.cfg.SlowLatency
	}
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(h.cfg.Seed, uint64(len(h.names()))<<32|uint64(crc32.ChecksumIEEE([]byte(name)))))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.rec.add(Arrival{At: time.Now().UnixMicro(), Key: name, Path: req.URL.Path, Status: http.StatusOK, Idem: req.Header.Get("Idempotency-Key")})
		mu.Lock()
		d := lat.Draw(rnd)
		mu.Unlock()
		sleep(req, d)
		h.rec.done()
		writeJSON(w, http.StatusOK, map[string]bool{"received": true})
	})
}

// Listen opens each receiver's port on 127.0.0.1 (a down customer's is
// opened and closed, so that calls to it are refused) and serves them
// until Close.
func (h *Hooks) Listen() ([]Endpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.names() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(err, h.closeLocked())
		}
		e.URL = "http://" + ln.Addr().String()
		if e.Kind == "down" {
			ln.Close()
		} else {
			srv := &http.Server{Handler: h.Receiver(e.Name, e.Kind == "slow"), ReadHeaderTimeout: 10 * time.Second}
			h.servers = append(h.servers, srv)
			go func() { _ = srv.Serve(ln) }()
		}
		h.endpoints = append(h.endpoints, e)
	}
	return append([]Endpoint(nil), h.endpoints...), nil
}

// Close stops the receivers.
func (h *Hooks) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closeLocked()
}

func (h *Hooks) closeLocked() error {
	var errs []error
	for _, s := range h.servers {
		errs = append(errs, s.Close())
	}
	h.servers = nil
	return errors.Join(errs...)
}

// Stats are the receivers' figures together.
func (h *Hooks) Stats() Stats { s, _ := h.rec.snapshot(); return s }

func (h *Hooks) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if serveRecord(w, req, h.Stats, h.rec) {
		return
	}
	if strings.TrimSuffix(req.URL.Path, "/") == "/endpoints" {
		h.mu.Lock()
		e := append([]Endpoint(nil), h.endpoints...)
		h.mu.Unlock()
		writeJSON(w, http.StatusOK, e)
		return
	}
	http.NotFound(w, req)
}
