package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// api is the fake tokens-a-minute API (the package comment has its rule).
type api struct {
	quota    int64 // tokens a minute
	tol      time.Duration
	estimate float64
	off      string // either, below, above
	latMin   time.Duration
	latMax   time.Duration

	mu    sync.Mutex
	tat   time.Time
	costs *rand.Rand // the real costs, in the order calls are admitted
	lats  *rand.Rand
	calls []apiCall
	open  int // calls being answered
}

// apiCall is one call the API recorded.
type apiCall struct {
	At      int64 `json:"at_us"`   // arrival, Unix µs
	Cost    int64 `json:"cost"`    // tokens charged; 0 for a refusal
	Level   int64 `json:"level"`   // tokens the bucket holds after the call
	Open    int   `json:"open"`    // calls in flight at the API, this one included
	Refused bool  `json:"refused"` // answered 429
}

func apiFromArgs(args []string) (*api, error) {
	fs := flag.NewFlagSet("settle api", flag.ContinueOnError)
	quota := fs.Int64("quota", 600_000, "")
	tol := fs.Int64("tolerance", 20_000, "")
	est := fs.Int64("estimate", 500, "")
	off := fs.String("off", "either", "")
	seed := fs.Uint64("seed", 1, "")
	latMin := fs.Duration("latency-min", 100*time.Millisecond, "")
	latMax := fs.Duration("latency-max", 500*time.Millisecond, "")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return newAPI(*quota, *tol, *est, *off, *seed, *latMin, *latMax), nil
}

func newAPI(quota, tolerance, estimate int64, off string, seed uint64, latMin, latMax time.Duration) *api {
	return &api{quota: quota, estimate: float64(estimate), off: off, latMin: latMin, latMax: latMax,
		tol:   time.Duration(float64(tolerance) / float64(quota) * float64(time.Minute)),
		costs: rand.New(rand.NewPCG(seed, 7)), lats: rand.New(rand.NewPCG(seed, 11))}
}

// tokens is d of the bucket's time in tokens.
func (a *api) tokens(d time.Duration) int64 {
	return int64(math.Round(d.Minutes() * float64(a.quota)))
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		a.mu.Lock()
		b, err := json.Marshal(a.calls)
		a.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	}
	now := time.Now()
	a.mu.Lock()
	tat := a.tat
	if tat.Before(now) {
		tat = now
	}
	at := now.UnixMicro()
	if ahead := tat.Sub(now); ahead > a.tol {
		a.calls = append(a.calls, apiCall{At: at, Level: a.tokens(ahead), Open: a.open, Refused: true})
		a.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil((ahead - a.tol).Seconds()))))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"type":"tokens","message":"rate limit reached for tokens per minute"}}`)
		return
	}
	u := 1 + 2*a.costs.Float64() // 2 to 8 times off
	if a.off == "below" || a.off == "either" && a.costs.IntN(2) == 0 {
		u = -u
	}
	cost := max(int64(math.Round(a.estimate*math.Pow(2, u))), 1)
	a.tat = tat.Add(time.Duration(float64(cost) / float64(a.quota) * float64(time.Minute)))
	lat := a.latMin + time.Duration(a.lats.Float64()*float64(a.latMax-a.latMin))
	a.open++
	a.calls = append(a.calls, apiCall{At: at, Cost: cost, Level: a.tokens(a.tat.Sub(now)), Open: a.open})
	a.mu.Unlock()
	time.Sleep(lat)
	a.mu.Lock()
	a.open--
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Tokens-Used", strconv.FormatInt(cost, 10))
	fmt.Fprintf(w, `{"id":"c","choices":[{"message":{"content":"..."}}],"usage":{"prompt_tokens":%d,"completion_tokens":0,"total_tokens":%d}}`, cost, cost)
}
