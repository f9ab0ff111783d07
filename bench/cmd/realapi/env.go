package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/vendorfake"
	"github.com/sluicehq/sluice/internal/redistest"
)

// env is what every case shares: the built binaries and the processes.
type env struct {
	o                 options
	dir               string
	self, worker, enq string
	kids              *proc.Group
}

func (e *env) logf(format string, args ...any) {
	if e.o.verbose {
		fmt.Fprintf(os.Stderr, "realapi: "+format+"\n", args...)
	}
}

// caseEnv is one case's own directory and redis-server.
type caseEnv struct {
	*env
	name     string
	dir      string
	redisURL string
	rc       *redis.Client
	stop     func() error
	n        int // processes started, for log names
}

func (e *env) newCase(name string) (*caseEnv, error) {
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	srv, stop, err := redistest.Launch(redistest.Config{})
	if err != nil {
		return nil, err
	}
	return &caseEnv{env: e, name: name, dir: dir, redisURL: "redis://" + srv.Addr() + "/0", rc: redis.NewClient(srv.Options()), stop: stop}, nil
}

func (c *caseEnv) close() {
	c.rc.Close()
	_ = c.stop()
}

func (c *caseEnv) logf(format string, args ...any) { c.env.logf(c.name+": "+format, args...) }

// fake starts a vendor fake and returns it with its URL.
func (c *caseEnv) fake(ctx context.Context, vendor string, args ...string) (*proc.Child, string, error) {
	c.n++
	log := filepath.Join(c.dir, fmt.Sprintf("fake-%s-%d.log", vendor, c.n))
	return proc.StartServer(ctx, c.kids, c.name+" "+vendor+" fake", log, startLimit, c.self,
		append([]string{fakeArg, "-vendor", vendor, "-listen", "127.0.0.1:0"}, args...)...)
}

// policy writes a policy file and returns its path.
func (c *caseEnv) policy(name, yaml string) (string, error) {
	p := filepath.Join(c.dir, name)
	return p, os.WriteFile(p, []byte(yaml), 0o600)
}

// enqueue writes n jobs (line(i) each) and enqueues them with the built
// enqueue binary, two processes at once.
func (c *caseEnv) enqueue(ctx context.Context, policy string, n int, line func(i int) string) error {
	files, err := proc.WriteJobs(c.dir, n, 2, line)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := proc.Enqueue(ctx, c.enq, []string{"-policy", policy, "-redis", c.redisURL}, files); err != nil {
		return err
	}
	c.logf("enqueued %d jobs in %v", n, time.Since(t0).Round(time.Millisecond))
	return nil
}

// checkPolicy runs `enqueue stats` on policy: an error holds what the
// binary said when the policy is refused.
func (c *caseEnv) checkPolicy(ctx context.Context, policy string) error {
	out, err := exec.CommandContext(ctx, c.enq, "-policy", policy, "-redis", c.redisURL, "stats").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// workers starts n worker processes (-concurrency conc, or the default
// when conc is 0) and waits until each has started.
func (c *caseEnv) workers(ctx context.Context, policy string, n, conc int) ([]*proc.Child, error) {
	var ws []*proc.Child
	for range n {
		w, err := c.startWorker(policy, conc)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		if _, err := w.WaitLine(ctx, "sluice worker started", startLimit); err != nil {
			return nil, err
		}
	}
	c.logf("%d workers up", n)
	return ws, nil
}

func (c *caseEnv) startWorker(policy string, conc int) (*proc.Child, error) {
	c.n++
	args := []string{"-policy", policy, "-redis", c.redisURL, "-listen", "127.0.0.1:0", "-shutdown-timeout", "5s"}
	if conc > 0 {
		args = append(args, "-concurrency", strconv.Itoa(conc))
	}
	w, err := proc.Start(fmt.Sprintf("%s worker %d", c.name, c.n), filepath.Join(c.dir, fmt.Sprintf("worker-%d.log", c.n)), c.worker, args...)
	if err != nil {
		return nil, err
	}
	c.kids.Add(w)
	return w, nil
}

// stopWorkers stops ws with SIGTERM and returns notes on those that
// exited early or would not stop.
func stopWorkers(ws []*proc.Child) []string {
	var notes []string
	for _, w := range ws {
		if w.Exited() {
			notes = append(notes, fmt.Sprintf("%s exited during the run (%v): %s", w.Name, w.Err(), w.LastLines()))
			continue
		}
		if err := w.Stop(stopGrace); err != nil {
			notes = append(notes, fmt.Sprintf("%s after SIGTERM: %v", w.Name, err))
		}
	}
	return notes
}

// getJSON reads GET url into v.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func stats(ctx context.Context, url string) (vendorfake.Stats, error) {
	var s vendorfake.Stats
	return s, getJSON(ctx, url+"/stats", &s)
}

func arrivals(ctx context.Context, url string) ([]vendorfake.Arrival, error) {
	var a []vendorfake.Arrival
	return a, getJSON(ctx, url+"/arrivals", &a)
}

// span is the arrivals in [from, from+d), from being the first arrival's
// time when zero, with the counts a case reports.
type span struct {
	from          time.Time
	ok, refused   int
	lateRefused   int // refused at or after from+5s
	byReason      map[string]int
	tokens        int64 // charged to admitted calls
	output        int64 // of tokens, the output tokens
	first, lastOK time.Time
}

func measure(arr []vendorfake.Arrival, from time.Time, d time.Duration) span {
	s := span{from: from, byReason: map[string]int{}}
	if s.from.IsZero() && len(arr) > 0 {
		s.from = time.UnixMicro(arr[0].At)
	}
	end := s.from.Add(d)
	for _, a := range arr {
		at := time.UnixMicro(a.At)
		if at.Before(s.from) || !at.Before(end) {
			continue
		}
		if a.Reason == "" {
			s.ok++
			s.tokens += a.Tokens
			s.output += a.Output
			s.lastOK = at
			continue
		}
		s.byReason[a.Reason]++
		if a.Status == http.StatusTooManyRequests {
			s.refused++
			if !at.Before(s.from.Add(5 * time.Second)) {
				s.lateRefused++
			}
		}
	}
	return s
}

// reasons writes a span's refusals by reason.
func (s span) reasons() string {
	if len(s.byReason) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range []string{"requests", "tokens", "output_tokens", "rate", "concurrency", "overloaded"} {
		if n := s.byReason[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return strings.Join(parts, ", ")
}

// waitFor polls cond every 100 ms until it holds or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		if err := proc.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
