package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
)

// apiArg is the hidden first argument that makes this binary the quota API
// instead of the benchmark.
const apiArg = "api"

// API modes: what the API enforces.
const (
	modeTenant = "tenant" // a leaky bucket per tenant
	modeGlobal = "global" // one leaky bucket for every call
	modeNone   = "none"   // nothing: every call is answered 200
)

// leakyBucket is Shopify's definition of a quota, exactly: a bucket of
// capacity calls that leaks rate calls a second. A call that would
// overflow it is refused and adds nothing. The level is kept as the time
// the bucket needs to empty, in nanoseconds of a monotonic clock, so that
// it is exact for the rates the cases use (1 s / rate a whole number of
// nanoseconds). Not safe for concurrent use.
type leakyBucket struct {
	interval time.Duration // one call's share of the bucket: 1 s / rate
	capacity int64

	level    time.Duration // the time the bucket takes to empty, as of last
	last     time.Duration
	first    time.Duration // the first call's arrival
	accepted int64         // calls accepted so far
	refused  int64         // calls refused so far
}

func newLeakyBucket(rate, capacity int64) *leakyBucket {
	return &leakyBucket{interval: time.Second / time.Duration(rate), capacity: capacity}
}

// decide takes a call arriving at now (on the clock the bucket was fed
// from the start). When it would overflow the bucket it is refused:
// overflow is by how much, and retryAfter the whole seconds, at least
// one, until it would fit.
func (b *leakyBucket) decide(now time.Duration) (ok bool, retryAfter int, overflow time.Duration) {
	if b.accepted+b.refused == 0 {
		b.first = now
	}
	if now > b.last {
		b.level = max(0, b.level-(now-b.last))
		b.last = now
	}
	if over := b.level + b.interval - time.Duration(b.capacity)*b.interval; over > 0 {
		b.refused++
		return false, max(1, int((over+time.Second-1)/time.Second)), over
	}
	b.level += b.interval
	b.accepted++
	return true, 0, 0
}

// apiStats is the form of GET /stats: the API's counters since it
// started.
type apiStats struct {
	OK      int64 `json:"ok"`      // calls answered 200
	Refused int64 `json:"refused"` // calls answered 429
	// Tenants is how many tenants called at least once; RefusedTenants
	// how many were refused at least once.
	Tenants        int64 `json:"tenants"`
	RefusedTenants int64 `json:"refused_tenants"`
	// FirstCalls and FirstAfter are, over the tenants refused, the median
	// of the calls accepted before a tenant's first refusal and of the
	// time from its first call to that refusal (microseconds): about a
	// bucket's worth and a second or two is the switch from the burst to
	// the paced rate.
	FirstCalls int64 `json:"first_calls"`
	FirstAfter int64 `json:"first_after_us"`
	// Overflow is by how much the refused calls would have overflowed
	// their bucket, in microseconds: the median, the 90th percentile and
	// the largest. A refusal by a few milliseconds is a call that came a
	// little early; by about one interval, a call too many.
	Overflow [3]int64 `json:"overflow_us"`
}

// api is the quota API. Every request under /t/<tenant>/ is one call of
// that tenant, decided when it arrives and answered after a random
// latency; GET /stats hands the counters back. It honours nothing a
// client sends, and sends Retry-After (whole seconds) with each 429 and
// no other rate-limit header.
type api struct {
	mode       string
	rate       int64
	capacity   int64
	latencyMin time.Duration
	latencyMax time.Duration
	start      time.Time

	mu         sync.Mutex
	buckets    map[string]*leakyBucket // by tenant; "" in mode global
	seen       map[string]bool         // tenants that called, in mode none
	stats      apiStats
	overflows  []time.Duration
	firstCalls []int64         // per tenant refused: calls accepted before its first refusal
	firstAfter []time.Duration // and the time from its first call to it
}

func newAPI(mode string, rate, capacity int64, latencyMin, latencyMax time.Duration) *api {
	return &api{mode: mode, rate: rate, capacity: capacity, latencyMin: latencyMin, latencyMax: latencyMax,
		start: time.Now(), buckets: map[string]*leakyBucket{}, seen: map[string]bool{}}
}

// maxOverflows bounds the refusals whose overflow the API keeps.
const maxOverflows = 1 << 20

// call decides one call of tenant arriving at now.
func (a *api) call(tenant string, now time.Duration) (ok bool, retryAfter int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mode == modeNone {
		if !a.seen[tenant] {
			a.seen[tenant] = true
			a.stats.Tenants++
		}
		a.stats.OK++
		return true, 0
	}
	key := tenant
	if a.mode == modeGlobal {
		key = ""
	}
	b := a.buckets[key]
	if b == nil {
		b = newLeakyBucket(a.rate, a.capacity)
		a.buckets[key] = b
		a.stats.Tenants++
	}
	accepted, refused := b.accepted, b.refused
	ok, retryAfter, over := b.decide(now)
	if ok {
		a.stats.OK++
		return true, 0
	}
	a.stats.Refused++
	if refused == 0 {
		a.stats.RefusedTenants++
		if len(a.firstCalls) < maxOverflows {
			a.firstCalls = append(a.firstCalls, accepted)
			a.firstAfter = append(a.firstAfter, now-b.first)
		}
	}
	if len(a.overflows) < maxOverflows {
		a.overflows = append(a.overflows, over)
	}
	return false, retryAfter
}

// snapshot returns the counters, with the overflow percentiles.
func (a *api) snapshot() apiStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	if a.mode == modeGlobal {
		s.Tenants = int64(len(a.seen))
	}
	if n := len(a.overflows); n > 0 {
		o := slices.Clone(a.overflows)
		slices.Sort(o)
		s.Overflow = [3]int64{o[n/2].Microseconds(), o[n*9/10].Microseconds(), o[n-1].Microseconds()}
	}
	if n := len(a.firstCalls); n > 0 {
		c, d := slices.Clone(a.firstCalls), slices.Clone(a.firstAfter)
		slices.Sort(c)
		slices.Sort(d)
		s.FirstCalls, s.FirstAfter = c[n/2], d[n/2].Microseconds()
	}
	return s
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.snapshot())
		return
	}
	tenant, ok := tenantOf(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if a.mode == modeGlobal {
		a.mu.Lock()
		a.seen[tenant] = true
		a.mu.Unlock()
	}
	allowed, retry := a.call(tenant, time.Since(a.start))
	d := a.latencyMin
	if a.latencyMax > a.latencyMin {
		d += rand.N(a.latencyMax - a.latencyMin)
	}
	time.Sleep(d)
	if !allowed {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		http.Error(w, "rate limited", http.StatusTooManyRequests)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// tenantOf reads the tenant of a call's path, /t/<tenant>/<anything>.
func tenantOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/t/")
	if !ok {
		return "", false
	}
	tenant, _, _ := strings.Cut(rest, "/")
	return tenant, tenant != ""
}

// apiConfig is what an API process is started with.
type apiConfig struct {
	mode                   string
	rate, capacity         int64
	latencyMin, latencyMax time.Duration
	life                   time.Duration
}

// args is the command line that starts the API process.
func (c apiConfig) args() []string {
	return []string{apiArg, "-mode", c.mode, "-rate", strconv.FormatInt(c.rate, 10), "-capacity", strconv.FormatInt(c.capacity, 10),
		"-latency-min", c.latencyMin.String(), "-latency-max", c.latencyMax.String(), "-life", c.life.String()}
}

func (c apiConfig) String() string {
	switch c.mode {
	case modeTenant:
		return fmt.Sprintf("leaky bucket per tenant, %d/s, capacity %d", c.rate, c.capacity)
	case modeGlobal:
		return fmt.Sprintf("one leaky bucket, %d/s, capacity %d", c.rate, c.capacity)
	}
	return "no limit"
}

func (c apiConfig) check() error {
	switch c.mode {
	case modeNone:
	case modeTenant, modeGlobal:
		if c.rate < 1 || c.capacity < 1 || time.Second%time.Duration(c.rate) != 0 {
			return fmt.Errorf("-rate must divide 1s into whole nanoseconds and -capacity be at least 1; got %d and %d", c.rate, c.capacity)
		}
	default:
		return fmt.Errorf("-mode must be %s, %s or %s; got %q", modeTenant, modeGlobal, modeNone, c.mode)
	}
	if c.latencyMin < 0 || c.latencyMax < c.latencyMin {
		return fmt.Errorf("-latency-min must be at least 0 and at most -latency-max; got %v and %v", c.latencyMin, c.latencyMax)
	}
	return nil
}

// apiMain runs the API process (proc.Serve) until SIGTERM, SIGINT or the
// end of -life.
func apiMain(args []string) error {
	var c apiConfig
	fs := flag.NewFlagSet("scale api", flag.ContinueOnError)
	fs.StringVar(&c.mode, "mode", modeTenant, "tenant: a leaky bucket per tenant; global: one for all calls; none: no limit")
	fs.Int64Var(&c.rate, "rate", 2, "calls a second that a bucket leaks")
	fs.Int64Var(&c.capacity, "capacity", 40, "a bucket's capacity in calls")
	fs.DurationVar(&c.latencyMin, "latency-min", time.Millisecond, "the least time a call takes to answer")
	fs.DurationVar(&c.latencyMax, "latency-max", 5*time.Millisecond, "the most time a call takes to answer")
	fs.DurationVar(&c.life, "life", 30*time.Minute, "exit after this long whatever happens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	return proc.Serve(newAPI(c.mode, c.rate, c.capacity, c.latencyMin, c.latencyMax), c.life)
}
