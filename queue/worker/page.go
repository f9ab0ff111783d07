package worker

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
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
}

var defaultPageLimits = pageLimits{Top: 20, Look: 1000, Sleepers: 20, Downstreams: 50}

// pageDownstream is one row of the downstreams' table.
type pageDownstream struct {
	Name       string
	Configured string // the policy's rates
	PerTenant  bool   // one bucket per tenant: no single state to show
	State      throttle.State
	Cap        int64 // concurrency cap, 0 for none
	// Calls and Refused (429s) count the responses this process has seen
	// in the last minute (since it started, in its first minute).
	Calls, Refused float64
	Err            string
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

// servePage answers GET /.
func (w *Worker) servePage(rw http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	v := w.pageView(ctx, w.page)
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	if err := pageTmpl.Execute(rw, v); err != nil {
		w.log.Warn("sluice: the page", "err", err)
	}
}

// pageView reads the page's state: three commands (throttle.State) for
// each of the first lim.Downstreams downstreams by name, the waiting
// room's counters, at most lim.Sleepers asleep tenants and the largest
// backlogs of at most lim.Look tenants.
func (w *Worker) pageView(ctx context.Context, lim pageLimits) pageView {
	v := pageView{Queue: w.policy.Queue.Name, Monitoring: "/monitoring/queues/" + w.policy.Queue.Name, Refresh: pageRefresh,
		Now: time.Now(), Bound: w.policy.Queue.Bound}
	calls, refused := w.calls.lastMinute(w.responsesByDownstream())
	shown := w.downstreams[:min(len(w.downstreams), cmp.Or(lim.Downstreams, defaultPageLimits.Downstreams))]
	v.MoreDownstreams = len(w.downstreams) - len(shown)
	for _, name := range shown {
		d := w.policy.Downstreams[name]
		rates := []string{throttle.Rate{Rate: d.Limit.Rate, Per: d.Limit.Per, Burst: d.Limit.Burst}.String()}
		for _, a := range d.Limit.Also {
			rates = append(rates, a.String())
		}
		row := pageDownstream{Name: name, Configured: strings.Join(rates, "; "), PerTenant: d.PerTenant,
			Calls: calls[name], Refused: refused[name]}
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
	var errs [3]error
	v.Stats, errs[0] = w.producer.Stats(ctx)
	v.Sleepers, errs[1] = w.producer.Sleepers(ctx, lim.Sleepers)
	v.MoreAsleep = max(v.Stats.Sleeping-int64(len(v.Sleepers)), 0)
	v.Backlogs, v.Looked, errs[2] = w.producer.Backlogs(ctx, lim.Top, lim.Look)
	if err := errors.Join(errs[:]...); err != nil {
		v.Err = err.Error()
	}
	return v
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

// sampleEvery is how often the worker records its counts for the page.
const sampleEvery = 5 * time.Second

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
