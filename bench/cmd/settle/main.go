// Command settle measures reserve-then-settle against an API that charges
// each call what it turns out to cost, as LLM APIs charge tokens.
//
// It starts its own redis-server on a free loopback port (see
// internal/redistest) and, in its own process, two copies of a fake API
// on loopback that allows -quota tokens a minute with a tolerance of
// -api-burst tokens (a GCRA over tokens: a call that arrives while the
// bucket holds more than the tolerance gets 429 with Retry-After; a call
// admitted is charged its real cost when it arrives). Each call's real
// cost is the estimate times 2^u, u uniform on [-3,-1] ∪ [1,3]: 2 to 8
// times off either way, 2.3 times the estimate on average. The API
// reports it in X-Tokens-Used and in usage.total_tokens, after a latency
// of -latency.
//
// Against each, -workers goroutines run the built-in sluice.http job as
// the worker does (throttle.Wait for the job's units, the reservation in
// the context, httpjob.Handler) at the same time for -duration:
//
//   - estimate: the downstream has no cost_from: every call books the
//     estimate and nothing corrects it (the path without settling);
//   - settle: cost_from json:usage.total_tokens: each slot is settled to
//     the reported cost.
//
// It prints the tokens the API admitted as a share of what it could have
// admitted in the run (quota × duration + tolerance), the calls, and the
// 429s.
//
//	go run ./cmd/settle -duration 60s
//	go run ./cmd/settle -duration 60s -off below
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
	"github.com/sluicehq/sluice/throttle"
)

func main() {
	var (
		quota    = flag.Int64("quota", 600_000, "the API's tokens a minute")
		apiBurst = flag.Int64("api-burst", 20_000, "the API's tolerance, in tokens")
		burst    = flag.Int64("burst", 10_000, "the downstream's burst as the policy gives it, in tokens")
		estimate = flag.Int64("estimate", 500, "each job's units: the estimate it books")
		workers  = flag.Int("workers", 8, "goroutines running jobs against each API")
		latency  = flag.Duration("latency", 300*time.Millisecond, "the API's answer time")
		duration = flag.Duration("duration", 60*time.Second, "how long each approach runs (both at once)")
		seed     = flag.Uint64("seed", 1, "seed of the real costs")
		off      = flag.String("off", "either", "how the real cost is off the estimate, 2 to 8 times: either way (\"either\"), \"below\" (an estimate such as max_tokens) or \"above\"")
	)
	flag.Parse()
	if *off != "either" && *off != "below" && *off != "above" {
		fmt.Fprintf(os.Stderr, "settle: -off must be either, below or above, got %q\n", *off)
		os.Exit(2)
	}
	if err := run(*quota, *apiBurst, *burst, *estimate, *workers, *latency, *duration, *seed, *off); err != nil {
		fmt.Fprintln(os.Stderr, "settle:", err)
		os.Exit(1)
	}
}

func run(quota, apiBurst, burst, estimate int64, workers int, latency, duration time.Duration, seed uint64, off string) error {
	srv, stop, err := redistest.Launch(redistest.Config{})
	if err != nil {
		return err
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, "settle:", err)
		}
	}()
	client := redis.NewClient(srv.Options())
	defer client.Close()

	approaches := []struct {
		name string
		from string
	}{{"estimate", ""}, {"settle", "json:usage.total_tokens"}}
	results := make([]*api, len(approaches))
	var wg sync.WaitGroup
	errs := make(chan error, len(approaches))
	for i, a := range approaches {
		ap, err := startAPI(quota, apiBurst, estimate, latency, seed, off) // the same costs for both
		if err != nil {
			return err
		}
		defer ap.close()
		results[i] = ap
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- drive(client, ap, a.name, a.from, quota, burst, estimate, workers, duration)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	ceiling := float64(quota)*duration.Minutes() + float64(apiBurst)
	fmt.Printf("API: %d tokens a minute, tolerance %d; estimate %d tokens a call, real 2-8x off (%s); %d workers, %v latency, %v\n\n",
		quota, apiBurst, estimate, off, workers, latency, duration)
	fmt.Println("| approach | tokens admitted | of what the API allows | calls | 429s |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for i, a := range approaches {
		r := results[i]
		r.mu.Lock()
		fmt.Printf("| %s | %d | %.1f%% | %d | %d |\n", a.name, r.used, 100*float64(r.used)/ceiling, r.calls, r.refused)
		r.mu.Unlock()
	}
	return nil
}

// drive runs sluice.http jobs against ap from workers goroutines for d.
func drive(client redis.UniversalClient, ap *api, name, from string, quota, burst, estimate int64, workers int, d time.Duration) error {
	th, err := throttle.New(client, &throttle.Options{Prefix: "bench:" + name})
	if err != nil {
		return err
	}
	defer th.Close()
	cf := queue.CostFrom{}
	if from != "" {
		if cf, err = queue.ParseCostFrom(from); err != nil {
			return err
		}
	}
	base, _ := url.Parse(ap.url + "/")
	lim := throttle.Limit{Name: name, Rate: quota, Per: time.Minute, Burst: burst, MaxWait: 30 * time.Second}
	ds := queue.Downstream{Name: "llm", Limit: lim, BaseURL: base, CostFrom: cf, Timeout: 10 * time.Second}
	h := &httpjob.Handler{Throttle: th, Resolve: func(*queue.Job, string) (queue.Downstream, error) { return ds, nil }}
	payload, _ := json.Marshal(httpjob.Request{Method: "POST", URL: ap.url + "/v1/chat", Body: "{}"})
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var n atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				r, err := th.Wait(ctx, "llm", lim, estimate)
				var far *throttle.TooFarError
				switch {
				case errors.As(err, &far):
					sleep(ctx, far.RetryAfter)
					continue
				case err != nil:
					return // the run's end
				}
				job := &queue.Job{ID: "j" + strconv.FormatInt(n.Add(1), 10), Tenant: "t", Type: httpjob.Type, Downstream: "llm", Units: estimate, Payload: payload}
				_ = h.ProcessJob(queue.WithReservation(ctx, th, r), job) // a 429 paused the key: the next Wait honours it
			}
		}()
	}
	wg.Wait()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// api is the fake tokens-a-minute API.
type api struct {
	url      string
	close    func()
	quota    int64 // tokens a minute
	estimate float64
	off      string // either, below, above
	tol      time.Duration
	latency  time.Duration

	mu      sync.Mutex
	tat     time.Time
	rng     *rand.Rand
	used    int64
	calls   int64
	refused int64
}

func startAPI(quota, burst, estimate int64, latency time.Duration, seed uint64, off string) (*api, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &api{quota: quota, estimate: float64(estimate), off: off, latency: latency, rng: rand.New(rand.NewPCG(seed, 7)),
		tol: time.Duration(float64(burst) / float64(quota) * float64(time.Minute))}
	hs := &http.Server{Handler: a}
	go hs.Serve(ln)
	a.url = "http://" + ln.Addr().String()
	a.close = func() { hs.Close() }
	return a, nil
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	a.mu.Lock()
	tat := a.tat
	if tat.Before(now) {
		tat = now
	}
	if ahead := tat.Sub(now); ahead > a.tol {
		a.refused++
		a.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil((ahead - a.tol).Seconds()))))
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	u := 1 + 2*a.rng.Float64() // 2 to 8 times off, either way
	if a.off == "below" || a.off == "either" && a.rng.IntN(2) == 0 {
		u = -u
	}
	cost := int64(math.Round(a.estimate * math.Pow(2, u)))
	a.tat = tat.Add(time.Duration(float64(cost) / float64(a.quota) * float64(time.Minute)))
	a.used += cost
	a.calls++
	a.mu.Unlock()
	time.Sleep(a.latency)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Tokens-Used", strconv.FormatInt(cost, 10))
	fmt.Fprintf(w, `{"id":"c","choices":[{"message":{"content":"..."}}],"usage":{"prompt_tokens":%d,"completion_tokens":0,"total_tokens":%d}}`, cost, cost)
}
