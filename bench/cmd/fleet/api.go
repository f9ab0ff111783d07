package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

// apiArg is the hidden first argument that makes this binary the
// quota-enforcing API instead of the benchmark.
const apiArg = "api"

// quota decides whether a call arriving at now is within the API's quota.
// When it is not, retryAfter is the whole number of seconds the API puts
// in its Retry-After header. Implementations are not safe for concurrent
// use; the API holds a lock around each decision.
type quota interface {
	decide(now time.Time) (ok bool, retryAfter int)
}

// window allows rate calls in any sliding window of span: it keeps the
// times of the calls it accepted within the last span, and accepts a call
// when fewer than rate of them are left. A refused call is not logged, so
// it does not push the window on. Beyond the quota it always says
// "Retry-After: 1", as many real APIs with a per-second quota do.
type window struct {
	rate int
	span time.Duration
	log  []time.Time // accepted calls, oldest first; none span or more before the last decision
}

func (w *window) decide(now time.Time) (bool, int) {
	drop := 0
	for drop < len(w.log) && now.Sub(w.log[drop]) >= w.span {
		drop++
	}
	w.log = w.log[drop:]
	if len(w.log) >= w.rate {
		return false, 1
	}
	w.log = append(w.log, now)
	return true, 0
}

// gcra is the generic cell rate algorithm at one call per interval with a
// tolerance of tol intervals: a call at t is accepted when max(tat, t) - t
// <= tol*interval, and then moves the theoretical arrival time tat to
// max(tat, t) + interval. After an idle spell tol+1 calls pass at once,
// then one per interval. This is the rule of downstream.FakeServer's
// strict mode. A refused call changes nothing; its Retry-After is the time
// until a call would conform, rounded up to whole seconds.
type gcra struct {
	interval time.Duration
	tol      int
	tat      time.Time
}

// newGCRA returns a GCRA at rate calls a second, the interval rounded up to
// the nanosecond (so that it never allows more than rate).
func newGCRA(rate, tol int) *gcra {
	return &gcra{interval: (time.Second + time.Duration(rate) - 1) / time.Duration(rate), tol: tol}
}

func (g *gcra) decide(now time.Time) (bool, int) {
	next := g.tat
	if next.Before(now) {
		next = now
	}
	slack := time.Duration(g.tol) * g.interval
	if early := next.Sub(now) - slack; early > 0 {
		return false, int((early + time.Second - 1) / time.Second)
	}
	g.tat = next.Add(g.interval)
	return true, 0
}

// arrival is one call as the API saw it.
type arrival struct {
	At time.Time
	OK bool // answered 200; false: 429
}

// arrivalsJSON is the form of GET /arrivals: the calls in the order the
// API decided them, as Unix nanoseconds and whether each was accepted.
type arrivalsJSON struct {
	At []int64 `json:"at"`
	OK []bool  `json:"ok"`
}

// api is the quota-enforcing HTTP API: every request under /api/ is one
// call, decided by the quota at its arrival and recorded; GET /arrivals
// hands the record back. It honours nothing a client sends and sends no
// RateLimit headers.
type api struct {
	latency time.Duration // every call is answered this long after it is decided
	now     func() time.Time

	mu       sync.Mutex
	q        quota
	arrivals []arrival
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/arrivals":
		a.mu.Lock()
		out := arrivalsJSON{At: make([]int64, len(a.arrivals)), OK: make([]bool, len(a.arrivals))}
		for i, c := range a.arrivals {
			out.At[i], out.OK[i] = c.At.UnixNano(), c.OK
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	if len(r.URL.Path) < 5 || r.URL.Path[:5] != "/api/" {
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	now := a.now()
	ok, retry := a.q.decide(now)
	a.arrivals = append(a.arrivals, arrival{At: now, OK: ok})
	a.mu.Unlock()
	if a.latency > 0 {
		time.Sleep(a.latency)
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		http.Error(w, "rate limited", http.StatusTooManyRequests)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// apiConfig is what the API process is started with.
type apiConfig struct {
	mode    string // "window" or "gcra"
	rate    int
	tol     int
	latency time.Duration
	life    time.Duration
}

// args is the command line that starts the API process.
func (c apiConfig) args() []string {
	return []string{apiArg, "-mode", c.mode, "-rate", strconv.Itoa(c.rate), "-tol", strconv.Itoa(c.tol),
		"-latency", c.latency.String(), "-life", c.life.String()}
}

func (c apiConfig) String() string {
	s := fmt.Sprintf("%s %d/s", c.mode, c.rate)
	if c.mode == "gcra" {
		s += fmt.Sprintf(" tol %d", c.tol)
	}
	if c.latency > 0 {
		s += fmt.Sprintf(", calls take %v", c.latency)
	}
	return s
}

func (c apiConfig) quota() (quota, error) {
	if c.rate < 1 {
		return nil, fmt.Errorf("-rate must be at least 1, got %d", c.rate)
	}
	switch c.mode {
	case "window":
		return &window{rate: c.rate, span: time.Second}, nil
	case "gcra":
		if c.tol < 0 {
			return nil, fmt.Errorf("-tol must not be negative, got %d", c.tol)
		}
		return newGCRA(c.rate, c.tol), nil
	}
	return nil, fmt.Errorf("-mode must be window or gcra, got %q", c.mode)
}

// apiMain runs the API process (proc.Serve) until SIGTERM, SIGINT or the
// end of -life.
func apiMain(args []string) error {
	var c apiConfig
	fs := flag.NewFlagSet("fleet api", flag.ContinueOnError)
	fs.StringVar(&c.mode, "mode", "window", "window: rate calls in any sliding second; gcra: GCRA at rate/s, tolerance -tol calls")
	fs.IntVar(&c.rate, "rate", 50, "calls a second")
	fs.IntVar(&c.tol, "tol", 2, "the GCRA's tolerance in calls")
	fs.DurationVar(&c.latency, "latency", 0, "how long each call takes to answer")
	fs.DurationVar(&c.life, "life", 10*time.Minute, "exit after this long whatever happens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	q, err := c.quota()
	if err != nil {
		return err
	}
	return proc.Serve(&api{q: q, latency: c.latency, now: time.Now}, c.life)
}
