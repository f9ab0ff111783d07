package worker

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/throttle"
)

// pagePolicy is the policy of the page's tests: a paced downstream with a
// concurrency cap, one that the built-in HTTP job calls at BASE, one
// with a bucket per tenant, and one of tokens a minute with a request
// rate beside.
const pagePolicy = `queue:
  name: pageq
  bound: 100000
downstreams:
  api:
    rate: 50
    per: 1s
    burst: 5
    max_wait: 2s
    concurrency: 4
  shop:
    base_url: BASE/
    rate: 2
    per: 1s
  feeds:
    rate: 10
    per: 1s
    per_tenant: true
  llm:
    rate: 3000
    per: 1m
    also: [{rate: 2, per: 1s, burst: 40}]
`

func writePolicy(t *testing.T, text string) (string, *policy.Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// startedWorker returns a worker on client with the page's limits lim,
// started (Redis checked, everything made) but not serving, and closed
// when the test ends.
func startedWorker(t *testing.T, cfg *policy.Config, client redis.UniversalClient, lim pageLimits) *Worker {
	t.Helper()
	w, err := New(&Config{Policy: cfg, Redis: client, Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.page = lim
	if err := w.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w
}

// commandCounter counts the commands a client sends, pipelined or not,
// but a new connection's handshake (HELLO, CLIENT SETINFO); and among
// them those whose number depends on what Backlogs meets: the SSCANs (as
// many as the set's layout takes) and the LINDEXes (one for each hashed
// id it lists).
type commandCounter struct{ n, varying atomic.Int64 }

func (c *commandCounter) count(cmd redis.Cmder) {
	switch cmd.Name() {
	case "hello", "client":
		return
	case "sscan", "lindex":
		c.varying.Add(1)
	}
	c.n.Add(1)
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.count(cmd); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// TestPageIsBoundedByWhatItReads: the page sends the same number of
// commands and is about the same size with 300 tenants as with 3,000 (it
// looks at a bounded number of them: pageLimits), lists no more tenants
// than its limits, and escapes what tenants are called.
func TestPageIsBoundedByWhatItReads(t *testing.T) {
	client := redistest.Start(t, redistest.Config{}).Client(t)
	var count commandCounter
	client.AddHook(&count)
	_, cfg := writePolicy(t, strings.Replace(pagePolicy, "BASE", "http://127.0.0.1:9", 1))
	lim := pageLimits{Top: 5, Look: 100, Sleepers: 5, Buckets: 4}
	w := startedWorker(t, cfg, client, lim)
	qc := cfg.QueueConfig()
	p, err := queue.NewProducer(client, &qc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	view := func() (body string, commands, varying int64) {
		t.Helper()
		rec := httptest.NewRecorder()
		n, v := count.n.Load(), count.varying.Load()
		w.servePage(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /: %d", rec.Code)
		}
		return rec.Body.String(), count.n.Load() - n, count.varying.Load() - v
	}
	add := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := p.Enqueue(ctx, queue.Job{Tenant: fmt.Sprintf("tenant-%05d", i), Type: "x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(0, 300)
	small, n1, s1 := view()
	add(300, 3000)
	large, n2, s2 := view()
	// Per view: Stats' 5, Sleepers' at most 2, three States of 3 (the
	// per-tenant downstream has none) and two HGETALLs of fleet counts
	// for each of the four downstreams, Backlogs: a few SSCANs (as many
	// as the set's layout takes to return Look members), an LLEN for each
	// tenant looked at, a LINDEX for each hashed id listed; and a State
	// of 3 for each of lim.Buckets tenants' buckets of the per-tenant
	// one, found with Marked's at most 2.
	most := int64(5 + 2 + 3*3 + 4*2 + lim.Look/256 + 8 + lim.Look + lim.Top + 2 + 3*lim.Buckets)
	if n1-s1 != n2-s2 || n1 > most || n2 > most {
		t.Fatalf("commands per view: %d (%d SSCANs and LINDEXes) with 300 tenants, %d (%d) with 3,000; want the same but those, at most %d",
			n1, s1, n2, s2, most)
	}
	if rows := strings.Count(large, "<tr><td>tenant-"); rows != lim.Top {
		t.Fatalf("%d tenants listed, want %d", rows, lim.Top)
	}
	if !strings.Contains(large, "Among 100 of 3000 tenants") {
		t.Fatalf("the page does not say it looked at 100 of 3000 tenants:\n%s", large)
	}
	t.Logf("%d and %d commands a view; %d and %d bytes", n1, n2, len(small), len(large))
	// The two differ only in counts (a digit more here and there).
	if d := len(large) - len(small); d < -20 || d > 20 {
		t.Fatalf("page of %d bytes with 300 tenants, %d with 3,000", len(small), len(large))
	}
	// Names are escaped: a tenant called <script>… shows as text.
	evil := `<script>alert("x")</script>`
	for range 3 {
		if _, err := p.Enqueue(ctx, queue.Job{Tenant: evil, Type: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	if err := pageTmpl.Execute(&b, w.pageView(ctx, pageLimits{Top: 1, Look: 10000, Sleepers: 1})); err != nil {
		t.Fatal(err)
	}
	if body := b.String(); strings.Contains(body, evil) || !strings.Contains(body, "<td>&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</td>") {
		t.Fatalf("the tenant's name is not escaped:\n%s", body)
	}
}

// browser returns the Chromium to run. Without one the test skips, unless
// SLUICE_REQUIRE_BROWSER is set (CI): then it fails.
func browser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if ok, _ := strconv.ParseBool(os.Getenv("SLUICE_REQUIRE_BROWSER")); ok {
		t.Fatal("chromium not found, and SLUICE_REQUIRE_BROWSER is set: apt-get install chromium")
	}
	t.Skip("chromium not found; apt-get install chromium to open the page in a browser")
	return ""
}

// TestPageInBrowser runs a worker on a real Redis, pauses one downstream
// as a handler would (throttle.Backoff), lets the worker meet a 429 from
// another, and opens the page in headless Chromium: it must show both
// pauses with their ends, the leases, the calls and 429s, and the asleep
// tenants with what holds each, their names escaped; and it must load
// nothing but itself. With SLUICE_SCREENSHOT=path it saves a screenshot.
func TestPageInBrowser(t *testing.T) {
	exe := browser(t)
	srv := redistest.Start(t, redistest.Config{})
	client := srv.Client(t)
	var calls atomic.Int64
	fake := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			rw.Header().Set("Retry-After", "120")
			rw.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer fake.Close()
	path, cfg := writePolicy(t, strings.Replace(pagePolicy, "BASE", fake.URL, 1))
	addr, out := runWorker(t, path, "-redis", "redis://"+srv.Addr()+"/0")
	ctx := context.Background()
	th, err := throttle.New(client, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	api := cfg.Downstreams["api"]
	if _, err := th.Backoff(ctx, "api", api.Limit, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	qc := cfg.QueueConfig()
	p, err := queue.NewProducer(client, &qc)
	if err != nil {
		t.Fatal(err)
	}
	feeds := cfg.Downstreams["feeds"]
	hooli := queue.ThrottleKey(&queue.Job{Downstream: "feeds", Tenant: "hooli"}, true)
	if _, err := th.Backoff(ctx, hooli, feeds.Limit, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	lease, err := th.Acquire(ctx, "api", *api.Concurrency)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	acme := "<b>acme</b> & co"
	jobs := []queue.Job{{Tenant: acme}, {Tenant: acme}, {Tenant: acme}, {Tenant: "globex"}, {Tenant: "globex"}, {Tenant: "initech"},
		{Tenant: "hooli", Downstream: "feeds"}}
	for _, j := range jobs {
		j.Type, j.Downstream = "x", cmp.Or(j.Downstream, "api")
		if _, err := p.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Enqueue(ctx, queue.Job{Tenant: "umbrella", Type: "sluice.http", Downstream: "shop",
		Payload: []byte(`{"url":"` + fake.URL + `/orders","method":"POST"}`)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "five tenants asleep", func() bool {
		st, err := p.Stats(ctx)
		return err == nil && st.Sleeping == 5
	})
	hooliState, err := th.State(ctx, hooli, feeds.Limit)
	if err != nil {
		t.Fatal(err)
	}
	var page *http.Response
	waitUntil(t, 10*time.Second, "the fleet's count of shop's 429 on the page", func() bool {
		if page, err = http.Get("http://" + addr + "/"); err != nil {
			return false
		}
		defer page.Body.Close()
		body, _ := io.ReadAll(page.Body)
		return strings.Contains(string(body), `<span class="dim">fleet</span> 1 · 1`)
	})
	if csp := page.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'; style-src 'sha256-") {
		t.Errorf("Content-Security-Policy: %q", csp)
	}
	apiState, err := th.State(ctx, "api", api.Limit)
	if err != nil {
		t.Fatal(err)
	}
	shopState, err := th.State(ctx, "shop", cfg.Downstreams["shop"].Limit)
	if err != nil || shopState.Paused() == 0 {
		t.Fatalf("the worker did not pause shop after its 429: %+v, %v\n%s", shopState, err, out.String())
	}

	start := time.Now()
	actx, stop := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1100, 760))...)
	defer stop()
	bctx, stopTab := chromedp.NewContext(actx)
	defer stopTab()
	defer time.AfterFunc(time.Minute, stop).Stop() // a browser that hangs fails the test
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible("#asleep")); err != nil {
		t.Fatal(err)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return s
	}
	want := func(sel string, parts ...string) {
		t.Helper()
		got := text(sel)
		for _, p := range parts {
			if !strings.Contains(got, p) {
				t.Errorf("%s shows\n%s\nwithout %q", sel, got, p)
			}
		}
	}
	want("#downstreams",
		"api\t50 per 1s, burst 5\t", "paused until "+clockText(apiState.PausedUntil), "1 of 4", "ceiling",
		"shop\t2 per 1s\t", "paused until "+clockText(shopState.PausedUntil), "this worker 1 · 1\nfleet 1 · 1",
		"feeds\t10 per 1s\ta bucket per tenant: 1 paused or busy",
		"hooli\t", " per 1s (9", "paused until "+clockText(hooliState.PausedUntil), "pause: downstream feeds is paused",
		"llm\t3000 per 1m; 2 per 1s, burst 40\t3000 per 1m\n(100.0%)")
	want("#asleep",
		acme+"\t", "pause: downstream api is paused",
		"globex\t", "initech\t", "umbrella\t", "hooli\t", "rescheduled: HTTP 429 from "+strings.TrimPrefix(fake.URL, "http://"))
	want("#backlogs", "tenant\tjobs\n"+acme+"\t3\nglobex\t2\n")
	want("#depth", "8 of 100000 jobs waiting")
	// The chart of every downstream, the limit's line on the three with
	// one bucket, a 429's mark on shop's; and the page's style applies
	// under its CSP.
	charts := `[...document.querySelectorAll("svg.chart")].map(s => s.querySelectorAll("polyline.calls").length + "," +
		s.querySelectorAll("line.limit").length + "," + s.querySelectorAll("line.r429").length).join(" ")`
	if got, err := chromedp.Run(bctx, chromedp.Evaluate[string](charts)); err != nil || got != "1,1,0 1,0,0 1,1,0 1,1,1" {
		t.Errorf("charts (polyline, limit, 429 marks) of api, feeds, llm, shop: %q (%v)", got, err)
	}
	if c, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector(".paused")).color`)); err != nil || c != "rgb(187, 0, 0)" {
		t.Errorf("a pause's color: %q (%v); the page's style did not apply under its CSP", c, err)
	}
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("td b, td script").length`)); err != nil || n != 0 {
		t.Errorf("a tenant's name made %d elements (%v): not escaped", n, err)
	}
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[string](`performance.getEntriesByType("resource").map(e => e.name).join(" ")`)); err != nil || n != "" {
		t.Errorf("the page loaded more than itself: %q (%v)", n, err)
	}
	if r, err := chromedp.Run(bctx, chromedp.AttributeValue(`meta[http-equiv="refresh"]`, "content")); err != nil || r.Value != "5" {
		t.Errorf("refresh: %+v, %v", r, err)
	}
	if r, err := chromedp.Run(bctx, chromedp.AttributeValue(`a`, "href")); err != nil || r.Value != "/monitoring/queues/pageq" {
		t.Errorf("asynqmon link: %+v, %v", r, err)
	}
	if path := os.Getenv("SLUICE_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(path, png, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("the browser part took %v", time.Since(start).Round(time.Millisecond))
}

// TestCallCountsLastMinute: the page's calls and 429s are the last
// minute's: the counts now less those of the newest sample at least a
// minute old; everything since the start while the worker is younger.
func TestCallCountsLastMinute(t *testing.T) {
	var c callCounts
	m := func(n float64) map[string]float64 { return map[string]float64{"api": n} }
	start := time.Now().Add(-90 * time.Second)
	if all, _ := c.lastMinute(m(7), m(0)); all["api"] != 7 {
		t.Fatalf("no sample yet: %v calls; want all 7", all["api"])
	}
	for i, n := range []float64{0, 10, 20, 30} { // at -90 s, -60 s, -30 s, 0 s
		c.sample(start.Add(time.Duration(i)*30*time.Second), m(n), m(n/10))
	}
	all, refused := c.lastMinute(m(35), m(3.5))
	if all["api"] != 25 || refused["api"] != 2.5 {
		t.Fatalf("last minute: %v calls, %v refused; want 25 and 2.5 (since the sample of a minute ago)", all["api"], refused["api"])
	}
	if len(c.snaps) != 3 {
		t.Fatalf("%d samples kept; want 3 (the one at -90 s is no longer needed)", len(c.snaps))
	}
}

// TestPageBoundsDownstreams: with 1,000 downstreams, a view of the page
// reads the live state of the first lim.Downstreams by name (three
// commands each) and counts the rest, instead of three commands for
// every downstream (100,000 downstreams took 7.7 s and timed out).
func TestPageBoundsDownstreams(t *testing.T) {
	client := redistest.Start(t, redistest.Config{}).Client(t)
	var count commandCounter
	client.AddHook(&count)
	var b strings.Builder
	b.WriteString("queue:\n  name: manyds\n  bound: 10\ndownstreams:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  api-%04d: {rate: 10}\n", i)
	}
	_, cfg := writePolicy(t, b.String())
	lim := pageLimits{Top: 5, Look: 100, Sleepers: 5, Downstreams: 10}
	w := startedWorker(t, cfg, client, lim)
	rec := httptest.NewRecorder()
	before := count.n.Load()
	w.servePage(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	n := count.n.Load() - before
	body := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /: %d", rec.Code)
	}
	// Stats' 5, Sleepers' at most 2, Backlogs' few on an empty queue,
	// Marked's at most 2, and 3 (its State) and 2 (its fleet counts) for
	// each downstream listed.
	if most := int64(5 + 2 + 8 + 2 + 5*lim.Downstreams); n > most {
		t.Fatalf("%d commands for a view with 1,000 downstreams; want at most %d", n, most)
	}
	rows := strings.Count(body, "<td>api-")
	if rows != lim.Downstreams || !strings.Contains(body, "<td>api-0000</td>") || !strings.Contains(body, "… and 990 more") {
		t.Fatalf("%d downstreams listed, want the first %d and a count of 990 more:\n%s", rows, lim.Downstreams, body)
	}
	t.Logf("%d commands, %d bytes for a view with 1,000 downstreams", n, len(body))
}
