package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/redistest"
)

// system is one of the two systems of a run, with its own Redis, API and
// workers.
type system struct {
	name              string
	o                 options
	dir               string
	self, worker, enq string
	kids              *proc.Group
}

// summary is what one system did in the span measured.
type summary struct {
	system  string
	used    int64 // tokens the API admitted
	calls   int   // calls admitted
	refused int   // 429s
	notes   []string
}

func (s summary) share(o options) float64 { return float64(s.used) / o.ceiling() }

// met reports whether s meets the target.
func (s summary) met(o options) bool { return s.share(o) >= targetShare && s.refused <= target429s }

// sample is sluice's bucket level at one moment, for the time line.
type sample struct {
	at    int64 // Unix µs
	level int64 // tokens booked ahead of now
}

func (s *system) logf(format string, args ...any) {
	if s.o.verbose {
		fmt.Fprintf(os.Stderr, "settle: %s: "+format+"\n", append([]any{s.name}, args...)...)
	}
}

func (s *system) run(ctx context.Context) (summary, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return summary{}, err
	}
	srv, stopRedis, err := redistest.Launch(redistest.Config{})
	if err != nil {
		return summary{}, err
	}
	defer func() { _ = stopRedis() }()
	rc := redis.NewClient(srv.Options())
	defer rc.Close()
	redisURL := "redis://" + srv.Addr() + "/0"

	api, url, err := proc.StartServer(ctx, s.kids, s.name+" API", filepath.Join(s.dir, "api.log"), startLimit, s.self, s.o.apiArgs()...)
	if err != nil {
		return summary{}, err
	}
	defer api.Kill()

	policy := filepath.Join(s.dir, "policy.yaml")
	costFrom := ""
	if s.name == sysSettle {
		costFrom = "    cost_from: json:usage.total_tokens\n"
	}
	yaml := fmt.Sprintf("queue:\n  name: settle\n  bound: %d\ndownstreams:\n  llm:\n    base_url: %s/v1/\n    rate: %d\n    per: 1m\n    burst: %d\n    max_refusals: 1000\n%s",
		s.o.jobs+1000, url, s.o.quota, s.o.burst, costFrom)
	if err := os.WriteFile(policy, []byte(yaml), 0o600); err != nil {
		return summary{}, err
	}
	files, err := proc.WriteJobs(s.dir, s.o.jobs, 2, func(n int) string {
		return fmt.Sprintf(`{"tenant":"tenant-%d","type":"sluice.http","downstream":"llm","units":%d,"payload":{"method":"POST","url":"%s/v1/chat","body":"{}"}}`,
			n%s.o.tenants, s.o.estimate, url)
	})
	if err != nil {
		return summary{}, err
	}
	t0 := time.Now()
	if err := proc.Enqueue(ctx, s.enq, []string{"-policy", policy, "-redis", redisURL}, files); err != nil {
		return summary{}, fmt.Errorf("enqueueing: %w", err)
	}
	s.logf("enqueued %d jobs in %v", s.o.jobs, time.Since(t0).Round(time.Millisecond))

	var workers []*proc.Child
	for i := range s.o.workers {
		w, err := proc.Start(fmt.Sprintf("%s worker %d", s.name, i+1), filepath.Join(s.dir, fmt.Sprintf("worker-%d.log", i+1)), s.worker,
			"-policy", policy, "-redis", redisURL, "-listen", "127.0.0.1:0", "-concurrency", strconv.Itoa(s.o.conc), "-shutdown-timeout", "5s")
		if err != nil {
			return summary{}, err
		}
		s.kids.Add(w)
		defer w.Kill()
		workers = append(workers, w)
	}
	for _, w := range workers {
		if _, err := w.WaitLine(ctx, "sluice worker started", startLimit); err != nil {
			return summary{}, err
		}
	}
	s.logf("workers up")

	sctx, stopSampling := context.WithCancel(ctx)
	var samples []sample
	var wg sync.WaitGroup
	if s.o.timeline != "" {
		wg.Go(func() { samples = sampleLevels(sctx, rc, s.o.quota) })
	}
	// The span starts at the first call, within a second or so of the
	// workers' start: run long enough to cover it whole.
	err = proc.Sleep(ctx, s.o.duration+3*time.Second)
	stopSampling()
	wg.Wait()
	if err != nil {
		return summary{}, err
	}
	var notes []string
	for _, w := range workers {
		if w.Exited() {
			notes = append(notes, fmt.Sprintf("%s exited during the run (%v): %s", w.Name, w.Err(), w.LastLines()))
			continue
		}
		if err := w.Stop(stopGrace); err != nil {
			notes = append(notes, fmt.Sprintf("%s after SIGTERM: %v", w.Name, err))
		}
	}
	calls, err := fetchCalls(ctx, url)
	if err != nil {
		return summary{}, err
	}
	_ = api.Stop(stopGrace)
	sum := summarize(s.name, calls, s.o.duration)
	sum.notes = append(notes, sum.notes...)
	if s.o.timeline != "" {
		if err := writeTimeline(filepath.Join(s.o.timeline, s.name+".csv"), calls, samples); err != nil {
			return summary{}, err
		}
	}
	return sum, nil
}

// summarize counts the calls in the span d from the first.
func summarize(name string, calls []apiCall, d time.Duration) summary {
	s := summary{system: name}
	if len(calls) == 0 {
		s.notes = append(s.notes, "the API saw no call")
		return s
	}
	end := calls[0].At + d.Microseconds()
	for _, c := range calls {
		if c.At >= end {
			break
		}
		if c.Refused {
			s.refused++
			continue
		}
		s.used += c.Cost
		s.calls++
	}
	if last := calls[len(calls)-1].At; last < end-time.Second.Microseconds() {
		s.notes = append(s.notes, fmt.Sprintf("the last call came %v before the span's end: the jobs ran out (raise -jobs)", time.Duration(end-last)*time.Microsecond))
	}
	return s
}

// sampleLevels reads sluice's bucket level (how far its TAT is ahead of
// Redis's clock, in tokens) every 50 ms until ctx ends.
func sampleLevels(ctx context.Context, rc *redis.Client, quota int64) []sample {
	var out []sample
	var key string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		if key == "" {
			keys, _ := rc.Keys(ctx, "*rate*").Result()
			if len(keys) == 0 {
				continue
			}
			key = keys[0]
		}
		pipe := rc.Pipeline()
		now := pipe.Time(ctx)
		a := pipe.HGet(ctx, key, "a")
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			continue
		}
		tat, _ := strconv.ParseInt(a.Val(), 10, 64)
		n := now.Val().UnixMicro()
		out = append(out, sample{at: time.Now().UnixMicro(), level: max(tat-n, 0) * quota / 60_000_000})
	}
}

// writeTimeline writes the API's calls and sluice's level samples, in
// time order, as CSV: t (s from the first call), who (api, 429, sluice),
// level (tokens), cost, open (calls in flight at the API).
func writeTimeline(path string, calls []apiCall, samples []sample) error {
	if len(calls) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("t,who,level,cost,open\n")
	t0 := calls[0].At
	i, j := 0, 0
	for i < len(calls) || j < len(samples) {
		if j >= len(samples) || i < len(calls) && calls[i].At <= samples[j].at {
			c := calls[i]
			who := "api"
			if c.Refused {
				who = "429"
			}
			fmt.Fprintf(&b, "%.3f,%s,%d,%d,%d\n", float64(c.At-t0)/1e6, who, c.Level, c.Cost, c.Open)
			i++
			continue
		}
		fmt.Fprintf(&b, "%.3f,sluice,%d,,\n", float64(samples[j].at-t0)/1e6, samples[j].level)
		j++
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func fetchCalls(ctx context.Context, url string) ([]apiCall, error) {
	var calls []apiCall
	return calls, proc.Stats(ctx, url, &calls)
}

// report is the markdown table of the run.
func report(o options, rs []summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Reserve, then settle: the product path\n\nAPI: %d tokens a minute, tolerance %d; each job books %d tokens, its real cost 2-8x off (%s); %d worker processes × %d goroutines; answers in %v-%v; policy rate %d/1m, burst %d; %d jobs enqueued per system; %v measured from each API's first call.\n\n",
		o.quota, o.apiBurst, o.estimate, o.off, o.workers, o.conc, o.latMin, o.latMax, o.quota, o.burst, o.jobs, o.duration)
	b.WriteString("| system | tokens admitted | of what the API allows | calls | 429s |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, s := range rs {
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | %d | %d |\n", s.system, s.used, 100*s.share(o), s.calls, s.refused)
	}
	for _, s := range rs {
		if s.system != sysSettle {
			continue
		}
		verdict := "met"
		if !s.met(o) {
			verdict = "missed"
		}
		fmt.Fprintf(&b, "\nsettle's target (≥ %.0f%% of what the API allows, ≤ %d 429s): %s.\n", 100*targetShare, target429s, verdict)
	}
	for _, s := range rs {
		for _, n := range s.notes {
			fmt.Fprintf(&b, "\nNote (%s): %s\n", s.system, n)
		}
	}
	return b.String()
}
