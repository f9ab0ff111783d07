package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// The sluice page, served at /: what the throttle and the waiting room
// hold now, for an operator. It reads a bounded amount whatever the
// number of tenants (pageLimits), loads nothing from elsewhere, and
// reloads itself every pageRefresh seconds.

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "now"
		}
		if d > 10*time.Second {
			return "in " + d.Round(time.Second).String()
		}
		return "in " + d.Round(time.Millisecond).String()
	},
	"clock": clockText,
	"pct":   func(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) },
	"until": time.Until,
	"pace":  paceText,
	"add":   func(a, b int) int { return a + b },
	"f1":    func(f float64) string { return fmt.Sprintf("%.1f", f) },
}).Parse(pageHTML))

// clockText shows a time of day, to the millisecond, in UTC.
func clockText(t time.Time) string { return t.UTC().Format("15:04:05.000 UTC") }

// pageRefresh is how often the page reloads itself, in seconds.
const pageRefresh = 5

// pageLimits bound what one view of the page reads and shows.
type pageLimits struct {
	Top         int // tenants listed by backlog
	Look        int // tenants looked at to find them (queue.Producer.Backlogs)
	Sleepers    int // asleep tenants listed
	Downstreams int // downstreams listed, the first by name, with their state read; 0: the default
	// Buckets is how many tenants' buckets of per_tenant downstreams a
	// view reads (throttle.State, three commands each), over all of
	// them: the asleep tenants a downstream holds, then the largest
	// backlogs. 0: the default; negative: none.
	Buckets int
}

var defaultPageLimits = pageLimits{Top: 20, Look: 1000, Sleepers: 20, Downstreams: 50, Buckets: 20}

// pageDownstream is one row of the downstreams' table.
type pageDownstream struct {
	Name       string
	Configured string // the policy's rates
	Per        time.Duration
	PerTenant  bool // one bucket per tenant: Tenants shows some of them
	State      throttle.State
	Cap        int64 // concurrency cap, 0 for none
	// Calls and Refused (429s) count the responses this process has seen
	// in the last minute (since it started, in its first minute).
	Calls, Refused float64
	// FleetCalls and FleetRefused count those of every worker in the
	// last minute (flushFleet), Fleet its last minutes, nil when they
	// could not be read.
	FleetCalls, FleetRefused int64
	Fleet                    *fleetSeries
	Chart                    pageChart
	// Tenants are the buckets read of a per_tenant downstream that are
	// paused or busy, paused first, then by their next slot, furthest
	// first; Idle counts those read that are neither.
	Tenants []pageBucket
	Idle    int
	Err     string
}

// pageBucket is one tenant's bucket of a per_tenant downstream.
type pageBucket struct {
	Tenant string
	State  throttle.State
	Why    string // what its asleep tenant says, if it is asleep
}

// busy reports whether a bucket shows anything but an idle key: a
// pause, a slot later than now, a lease held or a share cut by a 429.
func (b pageBucket) busy() bool {
	return b.State.Paused() > 0 || b.State.Next > 0 || b.State.Leases > 0 || b.State.Share < 1
}

// pageView is everything the template shows.
type pageView struct {
	Queue, Monitoring string
	Refresh           int
	Now               time.Time
	Bound             int64
	Stats             queue.Stats
	Downstreams       []pageDownstream
	MoreDownstreams   int // not listed
	Backlogs          []queue.Backlog
	Looked            int
	Sleepers          []queue.Sleeper
	MoreAsleep        int64
	Err               string
}

// pageCSP is the page's Content-Security-Policy: nothing loaded, no
// script, and no style but the page's own block (by its hash); the
// chart is inline SVG drawn with attributes, which the policy allows.
var pageCSP = func() string {
	_, rest, _ := strings.Cut(pageHTML, "<style>")
	css, _, _ := strings.Cut(rest, "</style>")
	sum := sha256.Sum256([]byte(css))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

// servePage answers GET /.
func (w *Worker) servePage(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	v := w.pageView(ctx, w.page)
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	rw.Header().Set("Content-Security-Policy", pageCSP)
	if err := pageTmpl.Execute(rw, v); err != nil {
		w.log.Warn("sluice: the page", "err", err)
	}
}

// pageView reads the page's state: three commands (throttle.State) for
// each of the first lim.Downstreams downstreams by name, and one
// pipeline of their fleet-wide counts (readFleet); the waiting room's
// counters, at most lim.Sleepers asleep tenants and the largest
// backlogs of at most lim.Look tenants; and three commands for each of
// at most lim.Buckets tenants' buckets of per_tenant downstreams.
func (w *Worker) pageView(ctx context.Context, lim pageLimits) pageView {
	v := pageView{Queue: w.policy.Queue.Name, Monitoring: "/monitoring/queues/" + w.policy.Queue.Name, Refresh: pageRefresh,
		Now: time.Now(), Bound: w.policy.Queue.Bound}
	calls, refused := w.calls.lastMinute(w.responsesByDownstream())
	shown := w.downstreams[:min(len(w.downstreams), cmp.Or(lim.Downstreams, defaultPageLimits.Downstreams))]
	v.MoreDownstreams = len(w.downstreams) - len(shown)
	var errs []error
	fleet, err := w.readFleet(ctx, v.Now, shown)
	errs = append(errs, err)
	for _, name := range shown {
		d := w.policy.Downstreams[name]
		rates := []string{rateText(throttle.Rate{Rate: d.Limit.Rate, Per: d.Limit.Per, Burst: d.Limit.Burst})}
		for _, a := range d.Limit.Also {
			rates = append(rates, rateText(a))
		}
		row := pageDownstream{Name: name, Configured: strings.Join(rates, "; "), Per: cmp.Or(d.Limit.Per, time.Second),
			PerTenant: d.PerTenant, Calls: calls[name], Refused: refused[name], Fleet: fleet[name]}
		if row.Fleet != nil {
			row.FleetCalls, row.FleetRefused = row.Fleet.lastMinute()
			limit := 0.0
			if !d.PerTenant { // a per-tenant limit is no bound on the fleet's calls
				limit = float64(d.Limit.Rate) / row.Per.Seconds()
			}
			row.Chart = chart(row.Fleet, limit)
		}
		if d.Concurrency != nil {
			row.Cap = d.Concurrency.Max
		}
		if !d.PerTenant {
			var err error
			if row.State, err = w.th.State(ctx, name, d.Limit); err != nil {
				row.Err = err.Error()
			}
		}
		v.Downstreams = append(v.Downstreams, row)
	}
	st, err := w.producer.Stats(ctx)
	v.Stats = st
	errs = append(errs, err)
	v.Sleepers, err = w.producer.Sleepers(ctx, lim.Sleepers)
	errs = append(errs, err)
	v.MoreAsleep = max(v.Stats.Sleeping-int64(len(v.Sleepers)), 0)
	v.Backlogs, v.Looked, err = w.producer.Backlogs(ctx, lim.Top, lim.Look)
	errs = append(errs, err)
	budget := cmp.Or(lim.Buckets, defaultPageLimits.Buckets)
	marks, err := w.producer.Marked(ctx, budget)
	errs = append(errs, err)
	w.tenantBuckets(ctx, v.Downstreams, marks, v.Sleepers, v.Backlogs, budget)
	if err := errors.Join(errs...); err != nil {
		v.Err = err.Error()
	}
	return v
}

// tenantBuckets reads, for the per_tenant downstreams of rows, at most
// budget tenants' buckets, taking turns among the downstreams: first
// the tenants' keys that workers marked full (queue.Producer.Marked:
// the busiest and the paused, furthest first), then the asleep tenants
// whose reason names the downstream (soonest to wake first), then the
// tenants with the largest backlogs. Which downstream a backlog's jobs call is not known without
// reading them, so some of those buckets may be idle: they are counted,
// not listed.
func (w *Worker) tenantBuckets(ctx context.Context, rows []pageDownstream, marks []queue.Mark, sleepers []queue.Sleeper, backlogs []queue.Backlog, budget int) {
	type cand struct{ tenant, why string }
	var per []int
	queues := map[int][]cand{}
	for i, row := range rows {
		if !row.PerTenant || row.Err != "" {
			continue
		}
		per = append(per, i)
		seen, why := map[string]bool{}, map[string]string{}
		for _, s := range sleepers {
			if namesDownstream(s.Why, row.Name) {
				why[s.Tenant] = cmp.Or(why[s.Tenant], s.Why)
			}
		}
		for _, m := range marks {
			if m.Downstream == row.Name && m.Tenant != "" && !seen[m.Tenant] {
				seen[m.Tenant] = true
				queues[i] = append(queues[i], cand{m.Tenant, cmp.Or(why[m.Tenant], "its key marked full by a worker until "+clockText(m.Until))})
			}
		}
		for _, s := range sleepers {
			if why[s.Tenant] != "" && !seen[s.Tenant] {
				seen[s.Tenant] = true
				queues[i] = append(queues[i], cand{s.Tenant, s.Why})
			}
		}
		for _, b := range backlogs {
			if !seen[b.Tenant] {
				seen[b.Tenant] = true
				queues[i] = append(queues[i], cand{tenant: b.Tenant})
			}
		}
	}
	for budget > 0 {
		took := false
		for _, i := range per {
			if budget == 0 || len(queues[i]) == 0 {
				continue
			}
			c := queues[i][0]
			queues[i] = queues[i][1:]
			budget--
			took = true
			row := &rows[i]
			d := w.policy.Downstreams[row.Name]
			key := queue.ThrottleKey(&queue.Job{Downstream: row.Name, Tenant: c.tenant}, true)
			st, err := w.th.State(ctx, key, d.Limit)
			if err != nil {
				row.Err = err.Error()
				queues[i] = nil
				continue
			}
			if b := (pageBucket{Tenant: c.tenant, State: st, Why: c.why}); b.busy() {
				row.Tenants = append(row.Tenants, b)
			} else {
				row.Idle++
			}
		}
		if !took {
			break
		}
	}
	for _, i := range per {
		slices.SortStableFunc(rows[i].Tenants, func(a, b pageBucket) int {
			return cmp.Or(cmp.Compare(b.State.Paused(), a.State.Paused()), cmp.Compare(b.State.Next, a.State.Next))
		})
	}
}

// namesDownstream reports whether an asleep tenant's reason names the
// downstream (queue.Server's "pause: downstream NAME is paused …",
// "slot: downstream NAME's next slot …", "lease: … of downstream NAME
// is held").
func namesDownstream(why, name string) bool {
	return strings.Contains(why, "downstream "+name+" ") || strings.Contains(why, "downstream "+name+"'s ")
}

// periodText shows a period as a person writes it: "1s", "1m", "1h",
// "1m30s", "500ms".
func periodText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// rateText describes a rate in its own unit and period: "3000 per 1m",
// "2 per 1s, burst 40".
func rateText(r throttle.Rate) string {
	per := cmp.Or(r.Per, time.Second)
	s := throttle.Rate{Rate: r.Rate, Per: per, Burst: r.Burst, Counts: r.Counts}.String()
	return strings.Replace(s, "per "+per.String(), "per "+periodText(per), 1)
}

// paceText shows a pace of perSecond units a second in the limit's own
// period: "1500 per 1m".
func paceText(perSecond float64, per time.Duration) string {
	return fmt.Sprintf("%.4g per %s", perSecond*per.Seconds(), periodText(per))
}

// pageChart is the inline SVG of a downstream's fleet-wide calls a
// second over the chart's minutes, against its limit.
type pageChart struct {
	W, H    int
	Calls   string    // polyline points
	LimitY  float64   // the limit's line, when Limit > 0
	Limit   float64   // units a second; 0 for none drawn
	Top     float64   // calls a second at the top of the chart
	Refused []float64 // x of the buckets with 429s
	Minutes int
}

// chart draws s against limit (units a second, 0 for none).
func chart(s *fleetSeries, limit float64) pageChart {
	c := pageChart{W: 3 * fleetBuckets, H: 36, Limit: limit, Minutes: int(fleetBuckets * fleetBucket / time.Minute)}
	per := fleetBucket.Seconds()
	top := limit
	for _, n := range s.Calls {
		top = max(top, float64(n)/per)
	}
	c.Top = max(top*1.1, 1)
	y := func(v float64) float64 { return float64(c.H) - v/c.Top*float64(c.H-2) }
	step := float64(c.W) / float64(fleetBuckets-1)
	pts := make([]string, 0, fleetBuckets)
	for i, n := range s.Calls {
		x := float64(i) * step
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y(float64(n)/per)))
		if s.Refused[i] > 0 {
			c.Refused = append(c.Refused, x)
		}
	}
	c.Calls = strings.Join(pts, " ")
	if limit > 0 {
		c.LimitY = y(limit)
	}
	return c
}

// callCounts keeps the worker's response counts as they were every few
// seconds for the last minute (sample), so that the page can show the
// last minute's.
type callCounts struct {
	mu    sync.Mutex
	snaps []callSnap // oldest first, none older than a minute and a sample
}

type callSnap struct {
	at           time.Time
	all, refused map[string]float64
}

// sampleEvery is how often the worker records its counts for the page
// and adds them to the fleet's (flushFleet).
const sampleEvery = time.Second

// sample records the counts now and forgets those the last minute no
// longer needs.
func (c *callCounts) sample(now time.Time, all, refused map[string]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snaps = append(c.snaps, callSnap{now, all, refused})
	for len(c.snaps) > 1 && now.Sub(c.snaps[1].at) >= time.Minute {
		c.snaps = c.snaps[1:]
	}
}

// lastMinute returns the counts all and refused (now) less those of the
// newest sample at least a minute old, or of none (since the start)
// when the worker is younger.
func (c *callCounts) lastMinute(all, refused map[string]float64) (map[string]float64, map[string]float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.snaps) == 0 || time.Since(c.snaps[0].at) < time.Minute {
		return all, refused
	}
	old := c.snaps[0]
	for name := range all {
		all[name] -= old.all[name]
		refused[name] -= old.refused[name]
	}
	return all, refused
}

// responsesByDownstream returns, per downstream, the responses this
// process has seen since it started, and those with status 429, from its
// own sluice_downstream_responses_total.
func (w *Worker) responsesByDownstream() (all, refused map[string]float64) {
	all, refused = map[string]float64{}, map[string]float64{}
	mfs, err := w.reg.Gather()
	if err != nil {
		return all, refused
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_downstream_responses_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			n, name := m.GetCounter().GetValue(), labels["downstream"]
			all[name] += n
			if labels["code"] == "429" {
				refused[name] += n
			}
		}
	}
	return all, refused
}
