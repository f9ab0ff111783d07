package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/vendorfake"
)

// httpJob is one sluice.http job line.
func httpJob(id, tenant, downstream, method, url, body string) string {
	p := map[string]any{"method": method, "url": url}
	if body != "" {
		p["body"] = body
		p["header"] = map[string]string{"Content-Type": "application/json"}
	}
	j := map[string]any{"tenant": tenant, "type": "sluice.http", "downstream": downstream, "payload": p}
	if id != "" {
		j["id"] = id
	}
	b, _ := json.Marshal(j)
	return string(b)
}

// runFor waits for url's first arrival (up to startLimit) and then d
// from it, and returns when that span began.
func runFor(ctx context.Context, url string, d time.Duration) (time.Time, error) {
	var first time.Time
	err := waitFor(ctx, startLimit, func() (bool, error) {
		a, err := arrivals(ctx, url)
		if len(a) > 0 {
			first = time.UnixMicro(a[0].At)
		}
		return len(a) > 0, err
	})
	if err != nil {
		return first, fmt.Errorf("waiting for the first call: %w", err)
	}
	return first, proc.Sleep(ctx, time.Until(first.Add(d+300*time.Millisecond)))
}

const chatBody = `{"model":"gpt-fake","messages":[{"role":"user","content":"Summarise this order for the customer."}],"max_tokens":200}`

func runOpenAI60(ctx context.Context, c *caseEnv) ([]row, error) {
	return runLLM60(ctx, c, "openai", "/v1/chat/completions")
}

func runAnthropic60(ctx context.Context, c *caseEnv) ([]row, error) {
	return runLLM60(ctx, c, "anthropic", "/v1/messages", "-overload", "0.05", "-output-tpm", "400000")
}

// runLLM60: 60 requests a minute with one left, the reset the time until
// full; 40 jobs; one worker of the default concurrency; 30 s from the
// first call.
func runLLM60(ctx context.Context, c *caseEnv, vendor, path string, extra ...string) ([]row, error) {
	const span = 30 * time.Second
	fake, url, err := c.fake(ctx, vendor, append([]string{"-rpm", "60", "-tpm", "1000000", "-start-requests", "1"}, extra...)...)
	if err != nil {
		return nil, err
	}
	defer fake.Kill()
	policy, err := c.policy("policy.yaml", fmt.Sprintf("queue:\n  name: llm\n  bound: 1000\ndownstreams:\n  llm:\n    base_url: %s/v1/\n    rate: 60\n    per: 1m\n", url))
	if err != nil {
		return nil, err
	}
	if err := c.enqueue(ctx, policy, 40, func(i int) string {
		return httpJob("", fmt.Sprintf("app-%d", i%4), "llm", "POST", url+path, chatBody)
	}); err != nil {
		return nil, err
	}
	ws, err := c.workers(ctx, policy, 1, 0)
	if err != nil {
		return nil, err
	}
	from, err := runFor(ctx, url, span)
	if err != nil {
		return nil, err
	}
	notes := stopWorkers(ws)
	arr, err := arrivals(ctx, url)
	if err != nil {
		return nil, err
	}
	s := measure(arr, from, span)
	fig := fmt.Sprintf("%d calls in 30 s, %d 429s", s.ok, s.refused)
	if n := s.byReason["overloaded"]; n > 0 {
		fig += fmt.Sprintf(", %d 529s", n)
	}
	if s.ok > 0 {
		fig += fmt.Sprintf("; last call at %.1f s", s.lastOK.Sub(s.from).Seconds())
	}
	return []row{{name: c.name, target: "≥ 24 calls in 30 s, ≤ 3 429s", figure: fig, met: s.ok >= 24 && s.refused <= 3, notes: notes}}, nil
}

// runShared: Shopify's 100 stores, each a tenant, the other client taking
// half of each store's rate; then the same with headroom, when the
// policy takes the field.
func runShared(ctx context.Context, c *caseEnv) ([]row, error) {
	r, err := sharedRun(ctx, c, "")
	if err != nil {
		return nil, err
	}
	rows := []row{r}
	hc, err := c.env.newCase("shared-headroom")
	if err != nil {
		return nil, err
	}
	defer hc.close()
	probe, err := hc.policy("probe.yaml", sharedPolicy("http://127.0.0.1:1", c.o.headroom))
	if err != nil {
		return nil, err
	}
	if err := hc.checkPolicy(ctx, probe); err != nil {
		return append(rows, row{name: hc.name, skipped: true, target: "≤ 10% of the other client's calls refused",
			figure: "the policy has no headroom field", notes: []string{"headroom skipped: the built enqueue refused `headroom: " + c.o.headroom + "`: " + firstLine(err.Error())}}), nil
	}
	r, err = sharedRun(ctx, hc, c.o.headroom)
	if err != nil {
		return nil, err
	}
	return append(rows, r), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func sharedPolicy(url, headroom string) string {
	p := fmt.Sprintf("queue:\n  name: shop\n  bound: 100000\ndownstreams:\n  shopify:\n    base_url: %s/{tenant}/admin/api/\n    rate: 2\n    burst: 40\n    per_tenant: true\n", url)
	if headroom != "" {
		p += "    headroom: " + headroom + "\n"
	}
	return p
}

func sharedRun(ctx context.Context, c *caseEnv, headroom string) (row, error) {
	const (
		span   = 40 * time.Second
		stores = 100
	)
	fake, url, err := c.fake(ctx, "shopify", "-stores", fmt.Sprint(stores), "-other-share", "0.5", "-other-burst", "10")
	if err != nil {
		return row{}, err
	}
	defer fake.Kill()
	policy, err := c.policy("policy.yaml", sharedPolicy(url, headroom))
	if err != nil {
		return row{}, err
	}
	// A store's bucket and 40 s of its leak: 120 calls at most; 100 each
	// keeps every store busy, the other client taking its half.
	if err := c.enqueue(ctx, policy, stores*100, func(i int) string {
		return httpJob("", fmt.Sprintf("store-%d", i%stores), "shopify", "GET", fmt.Sprintf("%s/store-%d/admin/api/2024-01/orders.json", url, i%stores), "")
	}); err != nil {
		return row{}, err
	}
	ws, err := c.workers(ctx, policy, 2, 20)
	if err != nil {
		return row{}, err
	}
	var s0 vendorfake.Stats
	if err := waitFor(ctx, startLimit, func() (bool, error) {
		var err error
		s0, err = stats(ctx, url)
		return s0.Calls > 0, err
	}); err != nil {
		return row{}, fmt.Errorf("waiting for the first call: %w", err)
	}
	start := time.Now()
	if err := proc.Sleep(ctx, span); err != nil {
		return row{}, err
	}
	s1, err := stats(ctx, url)
	if err != nil {
		return row{}, err
	}
	notes := stopWorkers(ws)
	arr, err := arrivals(ctx, url)
	if err != nil {
		return row{}, err
	}
	s := measure(arr, start.Add(-100*time.Millisecond), span)
	oc, or := s1.Other.Calls-s0.Other.Calls, s1.Other.Refused-s0.Other.Refused
	share := float64(or) / float64(max(oc, 1))
	fig := fmt.Sprintf("%d 429s to sluice (%d calls served); the other client refused %.0f%% (%d of %d)", s.refused, s.ok, 100*share, or, oc)
	if headroom == "" {
		return row{name: c.name, target: "≤ 20 429s to sluice in 40 s", figure: fig, met: s.refused <= 20, notes: notes}, nil
	}
	return row{name: c.name, target: "headroom " + headroom + ": ≤ 10% of the other client's calls refused, ≤ 20 429s", figure: fig,
		met: share <= 0.10 && s.refused <= 20, notes: notes}, nil
}

// runStripe: 3 requests in flight beside 100/s, calls of 20-60 ms, the
// policy giving only the rate; two workers of 10; 30 s from the first
// call.
func runStripe(ctx context.Context, c *caseEnv) ([]row, error) {
	const span = 30 * time.Second
	lat, _ := vendorfake.ParseLatency("20ms-60ms")
	fake, url, err := c.fake(ctx, "stripe", "-rate", "100", "-concurrency", "3", "-latency", lat.String())
	if err != nil {
		return nil, err
	}
	defer fake.Kill()
	policy, err := c.policy("policy.yaml", fmt.Sprintf("queue:\n  name: pay\n  bound: 100000\ndownstreams:\n  stripe:\n    base_url: %s/v1/\n    rate: 100\n", url))
	if err != nil {
		return nil, err
	}
	allow := 3 * span.Seconds() / lat.Mean().Seconds() // what 3 in flight allow
	if err := c.enqueue(ctx, policy, int(1.3*allow), func(i int) string {
		return httpJob("", fmt.Sprintf("acct-%d", i%4), "stripe", "POST", url+"/v1/charges", `{"amount":100}`)
	}); err != nil {
		return nil, err
	}
	ws, err := c.workers(ctx, policy, 2, 10)
	if err != nil {
		return nil, err
	}
	from, err := runFor(ctx, url, span)
	if err != nil {
		return nil, err
	}
	notes := stopWorkers(ws)
	arr, err := arrivals(ctx, url)
	if err != nil {
		return nil, err
	}
	s := measure(arr, from, span)
	share := float64(s.ok) / allow
	fig := fmt.Sprintf("%.0f%% (%d calls, %.1f/s, of %.0f); %d 429s after 5 s (%d in all: %s)", 100*share, s.ok, float64(s.ok)/span.Seconds(), allow, s.lateRefused, s.refused, s.reasons())
	return []row{{name: c.name, target: "≥ 80% of what 3 in flight allow, ≤ 5 429s after the first 5 s", figure: fig,
		met: share >= 0.8 && s.lateRefused <= 5, notes: notes}}, nil
}

// runSigkill: one worker with 8 calls in flight (each 20 s long) is
// SIGKILLed while a second worker runs; the time until all 8 were called
// again.
func runSigkill(ctx context.Context, c *caseEnv) ([]row, error) {
	const (
		calls = 8
		bound = 150 * time.Second
	)
	fake, ctl, err := c.fake(ctx, "hooks", "-healthy", "1", "-slow", "0", "-down", "0", "-latency", "20s")
	if err != nil {
		return nil, err
	}
	defer fake.Kill()
	var eps []vendorfake.Endpoint
	if err := getJSON(ctx, ctl+"/endpoints", &eps); err != nil {
		return nil, err
	}
	url := eps[0].URL
	policy, err := c.policy("policy.yaml", fmt.Sprintf("queue:\n  name: kill\n  bound: 1000\ndownstreams:\n  api:\n    base_url: %s/\n    rate: 100\n", url))
	if err != nil {
		return nil, err
	}
	if err := c.enqueue(ctx, policy, calls, func(i int) string {
		return httpJob(fmt.Sprintf("kill-%d", i), fmt.Sprintf("t%d", i%2), "api", "POST", fmt.Sprintf("%s/job/%d", url, i), `{}`)
	}); err != nil {
		return nil, err
	}
	a, err := c.workers(ctx, policy, 1, calls)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, startLimit, func() (bool, error) {
		s, err := stats(ctx, ctl)
		return s.Open == calls, err
	}); err != nil {
		return nil, fmt.Errorf("waiting for %d calls in flight: %w", calls, err)
	}
	b, err := c.workers(ctx, policy, 1, calls)
	if err != nil {
		return nil, err
	}
	if s, err := stats(ctx, ctl); err != nil || s.Open != calls {
		return nil, fmt.Errorf("the calls ended before the kill (%d in flight, %v): raise the fake's latency", s.Open, err)
	}
	killed := time.Now()
	a[0].Kill()
	c.logf("killed %s with %d calls in flight", a[0].Name, calls)
	again := map[string]time.Time{}
	keysKept := true
	err = waitFor(ctx, bound, func() (bool, error) {
		arr, err := arrivals(ctx, ctl)
		first := map[string]string{}
		for _, x := range arr {
			if k, ok := first[x.Path]; !ok {
				first[x.Path] = x.Idem
			} else if _, done := again[x.Path]; !done {
				again[x.Path] = time.UnixMicro(x.At)
				keysKept = keysKept && k == x.Idem && k != ""
			}
		}
		return len(again) == calls, err
	})
	notes := stopWorkers(b)
	var lag []time.Duration
	for _, t := range again {
		lag = append(lag, t.Sub(killed))
	}
	slices.Sort(lag)
	if !keysKept {
		notes = append(notes, "a call ran again with another Idempotency-Key than its first")
	}
	if err != nil {
		return []row{{name: c.name, target: "all 8 called again within 15 s", figure: fmt.Sprintf("%d of 8 called again within %v", len(again), bound), notes: notes}}, nil
	}
	fig := fmt.Sprintf("all 8 again after %.1f s (the first after %.1f s)", lag[len(lag)-1].Seconds(), lag[0].Seconds())
	return []row{{name: c.name, target: "all 8 called again within 15 s", figure: fig, met: lag[len(lag)-1] <= 15*time.Second && keysKept, notes: notes}}, nil
}
