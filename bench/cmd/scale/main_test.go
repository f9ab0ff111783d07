package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue/policy"
)

// TestLeakyBucketSteps: the API's bucket, step by step: capacity calls at
// once, then one per interval; a refusal adds nothing and says how far
// over it was and the whole seconds to wait.
func TestLeakyBucketSteps(t *testing.T) {
	b := newLeakyBucket(2, 3) // 500ms a call, 3 calls
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for i, s := range []struct {
		at       time.Duration
		ok       bool
		retry    int
		overflow time.Duration
	}{
		{at: 0, ok: true}, {at: 0, ok: true}, {at: 0, ok: true},
		{at: ms(499), ok: false, retry: 1, overflow: ms(1)},
		{at: ms(500), ok: true},
		{at: ms(500), ok: false, retry: 1, overflow: ms(500)},
		{at: ms(1000), ok: true},
		{at: ms(5000), ok: true}, {at: ms(5000), ok: true}, {at: ms(5000), ok: true},
		{at: ms(5000), ok: false, retry: 1, overflow: ms(500)},
	} {
		ok, retry, over := b.decide(s.at)
		if ok != s.ok || retry != s.retry || over != s.overflow {
			t.Errorf("step %d at %v: %v, retry %d, overflow %v; want %v, %d, %v", i, s.at, ok, retry, over, s.ok, s.retry, s.overflow)
		}
	}
	if b.accepted != 8 || b.refused != 3 {
		t.Errorf("accepted %d, refused %d; want 8, 3", b.accepted, b.refused)
	}
}

// TestAPIModes: per tenant, each tenant has its own bucket; global, one
// bucket for all; none, no refusal. A 429 carries Retry-After, and
// /stats counts what happened.
func TestAPIModes(t *testing.T) {
	get := func(t *testing.T, url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for _, c := range []struct {
		mode string
		want []int // statuses of a/1, a/2, a/3, b/1
	}{
		{modeTenant, []int{200, 200, 429, 200}},
		{modeGlobal, []int{200, 200, 429, 429}},
		{modeNone, []int{200, 200, 200, 200}},
	} {
		t.Run(c.mode, func(t *testing.T) {
			a := newAPI(c.mode, 1, 2, 0, 0)
			srv := httptest.NewServer(a)
			defer srv.Close()
			var refused int64
			for i, path := range []string{"/t/a/1", "/t/a/2", "/t/a/3", "/t/b/1"} {
				code, retry := get(t, srv.URL+path)
				if code != c.want[i] {
					t.Errorf("%s: %d; want %d", path, code, c.want[i])
				}
				if code == 429 {
					refused++
					if retry != "1" {
						t.Errorf("%s: Retry-After %q; want 1", path, retry)
					}
				}
			}
			if code, _ := get(t, srv.URL+"/other/a/1"); code != 404 {
				t.Errorf("a path outside /t/: %d; want 404", code)
			}
			resp, err := http.Get(srv.URL + "/stats")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var s apiStats
			if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
				t.Fatal(err)
			}
			if s.OK != 4-refused || s.Refused != refused || s.Tenants != 2 {
				t.Errorf("stats %+v; want %d ok, %d refused, 2 tenants", s, 4-refused, refused)
			}
			if c.mode == modeTenant && (s.RefusedTenants != 1 || s.FirstCalls != 2) {
				t.Errorf("stats %+v; want tenant a refused once, after 2 calls", s)
			}
		})
	}
}

func TestTenantOf(t *testing.T) {
	for path, want := range map[string]string{"/t/shop-1/5": "shop-1", "/t/shop-1": "shop-1", "/t/": "", "/x/shop-1/5": "", "/t//5": ""} {
		got, ok := tenantOf(path)
		if got != want || ok != (want != "") {
			t.Errorf("tenantOf(%q) = %q, %v; want %q", path, got, ok, want)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	status := "Name:\tworker\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n"
	if n, ok := parseVmRSS(strings.NewReader(status)); !ok || n != 12345<<10 {
		t.Errorf("parseVmRSS = %d, %v; want %d", n, ok, 12345<<10)
	}
	if _, ok := parseVmRSS(strings.NewReader("Name:\tx\n")); ok {
		t.Error("a status without VmRSS read as ok")
	}
	if n, ok := rssOf(os.Getpid()); ok && n <= 0 {
		t.Errorf("this process's RSS: %d", n)
	}
}

// TestFlagsAndSizes: the case list and the systems filter, the global
// case's doubled goroutines, and job counts that cover every tenant's
// bucket and rate over the run, within -max-jobs.
func TestFlagsAndSizes(t *testing.T) {
	o, err := parseFlags([]string{"-cases", "tenants1k,global5k", "-warmup", "2s", "-measure", "8s", "-conc", "8", "-systems", "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.cases) != 2 || o.cases[0].name != "tenants1k" || o.cases[1].name != "global5k" {
		t.Fatalf("cases %+v", o.cases)
	}
	if o.cases[0].conc != 8 || o.cases[1].conc != 16 || o.cases[1].api.capacity != 100 {
		t.Errorf("conc %d and %d, global capacity %d; want 8, 16, 100", o.cases[0].conc, o.cases[1].conc, o.cases[1].api.capacity)
	}
	if len(o.cases[0].systems) != 1 || o.cases[0].systems[0] != sysSluice {
		t.Errorf("systems %v; want sluice alone", o.cases[0].systems)
	}
	// 1,000 tenants × (40 + 2/s × 10 s) × 1.1 + 100
	if n := o.jobCount(o.cases[0]); n != 66_100 {
		t.Errorf("tenants1k: %d jobs; want 66100", n)
	}
	o.maxJobs = 1000
	if n := o.jobCount(o.cases[0]); n != 1000 {
		t.Errorf("capped: %d jobs; want 1000", n)
	}
	for _, bad := range [][]string{{"-cases", "nope"}, {"-systems", "sidekiq"}, {"-measure", "0s"}, {"-sluice-burst", "0"}, {"-redis-cpu", "-1"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// TestPolicyAndJobs: the policy file sluice's workers get parses, with
// the downstream per tenant at the quota, and every job line names a URL
// under its base_url with the tenant the API reads from it.
func TestPolicyAndJobs(t *testing.T) {
	o, err := parseFlags([]string{"-cases", "tenants100,global5k"})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://127.0.0.1:1"
	for _, c := range o.cases {
		cfg, err := policy.Parse([]byte(o.policyYAML(c, url, 500)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		d, ok := cfg.Downstreams["api"]
		if !ok {
			t.Fatalf("%s: no downstream api", c.name)
		}
		if c.api.mode == modeTenant && (!d.PerTenant || d.Limit.Rate != 2 || d.Limit.Burst != 40) {
			t.Errorf("%s: downstream %+v; want per tenant, 2/s, burst 40", c.name, d)
		}
		if c.api.mode == modeGlobal && (d.PerTenant || d.Limit.Rate != 5000 || d.Limit.Burst != 100) {
			t.Errorf("%s: downstream %+v; want one bucket, 5000/s, burst 100", c.name, d)
		}
	}
	cfg, _ := policy.Parse([]byte(o.policyYAML(o.cases[0], url, 500)))
	files, err := proc.WriteJobs(t.TempDir(), 10, 4, jobLine(url, 3))
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(fh)
		for s.Scan() {
			lines++
			var j struct {
				Tenant, Type, Downstream string
				Payload                  struct{ URL string }
			}
			if err := json.Unmarshal(s.Bytes(), &j); err != nil {
				t.Fatal(err)
			}
			tenant, _ := tenantOf(strings.TrimPrefix(j.Payload.URL, url))
			d, err := cfg.DownstreamFor(j.Payload.URL)
			if err != nil || d.Name != "api" || j.Downstream != "api" || j.Type != "sluice.http" || tenant != j.Tenant {
				t.Errorf("%s: %+v (downstream of the URL %q, %v; tenant %q)", filepath.Base(f), j, d.Name, err, tenant)
			}
		}
		fh.Close()
	}
	if lines != 10 {
		t.Errorf("%d lines; want 10", lines)
	}
}

// TestPeerHandler: the recipe's refusals, by redis_rate or by the API,
// are rate-limit errors with their RetryAfter, which IsFailure ignores;
// bare asynq's 429 is a plain failure.
func TestPeerHandler(t *testing.T) {
	api := httptest.NewServer(newAPI(modeTenant, 1, 1, 0, 0))
	defer api.Close()
	rc := redistest.Shared(t)
	task := func(tenant string) *asynq.Task {
		p, _ := json.Marshal(callPayload{Tenant: tenant, URL: api.URL + "/t/" + tenant + "/1"})
		return asynq.NewTask(taskType, p)
	}
	prefix := redistest.KeyPrefix(t)
	ctx := context.Background()

	recipe := &peerHandler{system: sysRecipe, client: http.DefaultClient, lim: redis_rate.NewLimiter(rc),
		limit: redis_rate.Limit{Rate: 1, Burst: 1, Period: time.Second}}
	if err := recipe.ProcessTask(ctx, task(prefix+"r")); err != nil {
		t.Fatalf("the recipe's first call: %v", err)
	}
	var rl *rateLimitError
	if err := recipe.ProcessTask(ctx, task(prefix+"r")); !errors.As(err, &rl) || rl.source != "redis_rate" || rl.RetryAfter <= 0 {
		t.Errorf("the recipe's second call: %v; want redis_rate's refusal", err)
	}
	// A limiter that lets the call through to an API that refuses it.
	recipe.limit = redis_rate.Limit{Rate: 100, Burst: 100, Period: time.Second}
	if err := recipe.ProcessTask(ctx, task(prefix+"r2")); err != nil {
		t.Fatalf("the recipe's first call at a high limit: %v", err)
	}
	if err := recipe.ProcessTask(ctx, task(prefix+"r2")); !errors.As(err, &rl) || rl.source != "the API" || rl.RetryAfter != time.Second {
		t.Errorf("the recipe's call refused by the API: %v; want a rate-limit error, retry after 1s", err)
	}

	bare := &peerHandler{system: sysBare, client: http.DefaultClient}
	if err := bare.ProcessTask(ctx, task(prefix+"b")); err != nil {
		t.Fatalf("bare's first call: %v", err)
	}
	if err := bare.ProcessTask(ctx, task(prefix+"b")); err == nil || errors.As(err, &rl) {
		t.Errorf("bare's call refused by the API: %v; want a plain error", err)
	}
}
