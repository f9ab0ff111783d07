package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// TestFleetCountsAddUp: two workers' responses add up on the page of
// either as the fleet's, beside the worker's own; a flush sends only what
// grew since the last (nothing at all when nothing did); the counts of
// a 429 mark the chart; and counts older than the chart's span are not
// shown. On a standalone Redis and on the 3-master cluster (one flush
// and one read each go to the queue's node).
func TestFleetCountsAddUp(t *testing.T) {
	targets := map[string]func(t *testing.T) redis.UniversalClient{
		"standalone": func(t *testing.T) redis.UniversalClient { return redistest.Start(t, redistest.Config{}).Client(t) },
		"cluster":    func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t).Client(t) },
	}
	for name, start := range targets {
		t.Run(name, func(t *testing.T) {
			client := start(t)
			var count commandCounter
			if c, ok := client.(interface{ AddHook(redis.Hook) }); ok {
				c.AddHook(&count)
			}
			_, cfg := writePolicy(t, strings.Replace(pagePolicy, "BASE", "http://127.0.0.1:9", 1))
			lim := pageLimits{Top: 5, Look: 100, Sleepers: 5}
			w1 := startedWorker(t, cfg, client, lim)
			w2 := startedWorker(t, cfg, client, lim)
			ctx := context.Background()
			m := func(n float64) map[string]float64 { return map[string]float64{"shop": n, "api": 0} }
			now := time.Now()
			for _, f := range []struct {
				w            *Worker
				all, refused float64
			}{{w1, 3, 1}, {w2, 5, 0}, {w1, 4, 1}} {
				if err := f.w.flushFleet(ctx, now, m(f.all), m(f.refused)); err != nil {
					t.Fatal(err)
				}
			}
			before := count.n.Load()
			if err := w1.flushFleet(ctx, now, m(4), m(1)); err != nil {
				t.Fatal(err)
			}
			if n := count.n.Load() - before; n != 0 {
				t.Fatalf("a flush with nothing new sent %d commands; want none", n)
			}
			v := w1.pageView(ctx, lim)
			if v.Err != "" {
				t.Fatal(v.Err)
			}
			var shop, api pageDownstream
			for _, d := range v.Downstreams {
				switch d.Name {
				case "shop":
					shop = d
				case "api":
					api = d
				}
			}
			if shop.FleetCalls != 9 || shop.FleetRefused != 1 || shop.Calls != 0 {
				t.Fatalf("shop: fleet %d calls and %d 429s, this worker %v; want 9 and 1 (3+5+1, 1), and 0 (no real call)",
					shop.FleetCalls, shop.FleetRefused, shop.Calls)
			}
			if api.Fleet == nil || api.FleetCalls != 0 {
				t.Fatalf("api: %+v; want read, no calls", api)
			}
			if len(shop.Chart.Refused) != 1 || shop.Chart.Limit != 2 || !strings.Contains(shop.Chart.Calls, ",") {
				t.Fatalf("shop's chart: %+v; want one 429 mark and the limit, 2 a second", shop.Chart)
			}
			var b strings.Builder
			if err := pageTmpl.Execute(&b, v); err != nil {
				t.Fatal(err)
			}
			if body := b.String(); !strings.Contains(body, `<span class="dim">fleet</span> 9 · 1`) || !strings.Contains(body, `<polyline class="calls"`) {
				t.Fatalf("the page does not show shop's fleet counts and chart:\n%s", body)
			}
			later, err := w1.readFleet(ctx, now.Add(fleetBlock+fleetBucket), []string{"shop"})
			if err != nil {
				t.Fatal(err)
			}
			if c, r := later["shop"].lastMinute(); c != 0 || r != 0 || later["shop"].Calls != ([fleetBuckets]int64{}) {
				t.Fatalf("a chart's span later: %d calls, %d 429s, series %v; want none", c, r, later["shop"].Calls)
			}
		})
	}
}

// TestPageTenantBuckets: a per_tenant downstream's row lists its paused
// and busy tenants' buckets, paused first, from the largest backlogs,
// counts the idle ones it read, and reads no more than lim.Buckets.
func TestPageTenantBuckets(t *testing.T) {
	client := redistest.Start(t, redistest.Config{}).Client(t)
	_, cfg := writePolicy(t, strings.Replace(pagePolicy, "BASE", "http://127.0.0.1:9", 1))
	w := startedWorker(t, cfg, client, pageLimits{})
	ctx := context.Background()
	feeds := cfg.Downstreams["feeds"].Limit
	if _, err := w.th.Backoff(ctx, queue.ThrottleKey(&queue.Job{Downstream: "feeds", Tenant: "acme"}, true), feeds, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	// zeta has no jobs waiting and is not asleep, but a worker marked its
	// key full (as a put-back does, queue_claim.lua): its bucket is read
	// first.
	if _, err := w.th.Backoff(ctx, queue.ThrottleKey(&queue.Job{Downstream: "feeds", Tenant: "zeta"}, true), feeds, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := client.ZAdd(ctx, "sluice:q:full:{pageq}", redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMicro()), Member: "feeds/=zeta"}).Err(); err != nil {
		t.Fatal(err)
	}
	for range 15 {
		if _, err := w.th.Reserve(ctx, queue.ThrottleKey(&queue.Job{Downstream: "feeds", Tenant: "globex"}, true), feeds, 1); err != nil {
			t.Fatal(err)
		}
	}
	qc := cfg.QueueConfig()
	p, err := queue.NewProducer(client, &qc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "acme", "acme", "globex", "globex", "initech"} {
		if _, err := p.Enqueue(ctx, queue.Job{Tenant: tenant, Type: "x", Downstream: "feeds"}); err != nil {
			t.Fatal(err)
		}
	}
	row := func(lim pageLimits) pageDownstream {
		t.Helper()
		v := w.pageView(ctx, lim)
		for _, d := range v.Downstreams {
			if d.Name == "feeds" {
				return d
			}
		}
		t.Fatal("no feeds row")
		return pageDownstream{}
	}
	d := row(pageLimits{Top: 5, Look: 100, Sleepers: 5})
	if len(d.Tenants) != 3 || d.Idle != 1 || d.Tenants[0].Tenant != "acme" || d.Tenants[0].State.Paused() == 0 ||
		d.Tenants[1].Tenant != "zeta" || d.Tenants[1].State.Paused() == 0 || !strings.HasPrefix(d.Tenants[1].Why, "its key marked full") ||
		d.Tenants[2].Tenant != "globex" || d.Tenants[2].State.Next == 0 {
		t.Fatalf("feeds: %+v; want acme paused (10 min), zeta paused (5 min, marked), then globex busy, and initech idle", d)
	}
	if d := row(pageLimits{Top: 5, Look: 100, Sleepers: 5, Buckets: 1}); len(d.Tenants)+d.Idle != 1 || d.Tenants[0].Tenant != "zeta" {
		t.Fatalf("feeds with one bucket to read: %+v; want the marked zeta's alone", d)
	}
	if d := row(pageLimits{Top: 5, Look: 100, Sleepers: 5, Buckets: -1}); len(d.Tenants)+d.Idle != 0 {
		t.Fatalf("feeds with no bucket to read: %+v; want none read", d)
	}
	var b strings.Builder
	if err := pageTmpl.Execute(&b, w.pageView(ctx, pageLimits{Top: 5, Look: 100, Sleepers: 5})); err != nil {
		t.Fatal(err)
	}
	if body := b.String(); !strings.Contains(body, "a bucket per tenant: 3 paused or busy, 1 idle among 4 read") ||
		!strings.Contains(body, "<tr><td>acme</td>") {
		t.Fatalf("the page does not list feeds' buckets:\n%s", body)
	}
}

// TestNamesDownstream: an asleep tenant's reason names the downstream
// that holds it, as queue.Server words it, and not one whose name it
// starts with.
func TestNamesDownstream(t *testing.T) {
	for why, want := range map[string]bool{
		"pause: downstream feeds is paused (a 429 or 503)":          true,
		"slot: downstream feeds's next slot is beyond max_wait":     true,
		"lease: every concurrency slot of downstream feeds is held": true,
		"pause: downstream feeds2 is paused (a 429 or 503)":         false,
		"rescheduled: HTTP 429 from feeds.example":                  false,
	} {
		if got := namesDownstream(why, "feeds"); got != want {
			t.Errorf("namesDownstream(%q, feeds) = %v; want %v", why, got, want)
		}
	}
}

// TestRateText: rates and paces show in the limit's own unit and period.
func TestRateText(t *testing.T) {
	for r, want := range map[throttle.Rate]string{
		{Rate: 3000, Per: time.Minute}:                             "3000 per 1m",
		{Rate: 2, Burst: 40}:                                       "2 per 1s, burst 40",
		{Rate: 1000, Per: time.Hour, Counts: throttle.CountsCalls}: "1000 per 1h, counting calls",
		{Rate: 5, Per: 90 * time.Second}:                           "5 per 1m30s",
		{Rate: 1, Per: 500 * time.Millisecond}:                     "1 per 500ms",
		{Rate: 40000, Per: 24 * time.Hour}:                         "40000 per 24h",
	} {
		if got := rateText(r); got != want {
			t.Errorf("rateText(%+v) = %q; want %q", r, got, want)
		}
	}
	if got := paceText(50, time.Minute); got != "3000 per 1m" {
		t.Errorf("paceText(50/s, 1m) = %q; want 3000 per 1m", got)
	}
}
