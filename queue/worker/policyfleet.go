package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/policy"
	"github.com/sluicehq/sluice/throttle"
)

// One policy across the fleet (docs/operations.md, One policy across the
// fleet). Each worker publishes the limits its policy file enforces on
// each downstream, and their fingerprint, in a hash per queue
// (policyKey: a field per worker, rewritten every policyBeat), and reads
// every other live worker's. It paces each downstream at the strictest
// of the live workers' limits for it: the lowest rate (and its period),
// the smallest burst and concurrency, and of each also rate the lowest.
// A rolling change of a rate so never lets the API see more than the
// lower of the two while both run, whichever way it goes: a lower rate
// binds the whole fleet from the first worker that has it, a higher one
// once the last worker of the lower has gone (or reloaded). A worker that
// starts, or reloads, publishes before it runs a job and tells the others
// on policyChannel, so that they are bound within a round trip, not a
// beat. Workers that disagree are reported: a WARN line naming the
// difference, sluice_policy_fingerprints, and a line on the page.

const (
	// policyBeat is how often a worker rewrites its entry and reads the
	// others'.
	policyBeat = 5 * time.Second
	// policyTTL is how old an entry may be and count: a worker that
	// stopped binds nobody after it.
	policyTTL    = 3 * policyBeat
	policyPrefix = "sluice:q:policies"
)

// policyKey is the hash of the queue's workers' policies.
func policyKey(queue string) string { return policyPrefix + ":{" + queue + "}" }

// policyChannel is where a worker says it has published a new policy.
func policyChannel(queue string) string { return policyPrefix + ":changed:{" + queue + "}" }

// limits is what a policy enforces on one downstream: the fields the
// fingerprint covers and the fleet binds.
type limits struct {
	Rate        int64         `json:"rate"`
	Per         time.Duration `json:"per"`
	Burst       int64         `json:"burst"`
	Concurrency int64         `json:"concurrency,omitempty"`
	PerTenant   bool          `json:"per_tenant,omitempty"`
	Also        []alsoLimits  `json:"also,omitempty"`
}

type alsoLimits struct {
	Rate   int64         `json:"rate"`
	Per    time.Duration `json:"per"`
	Burst  int64         `json:"burst"`
	Counts string        `json:"counts"`
}

func limitsOf(d queue.Downstream) limits {
	l := limits{Rate: d.Limit.Rate, Per: cmp.Or(d.Limit.Per, time.Second), Burst: max(d.Limit.Burst, 1), PerTenant: d.PerTenant}
	if d.Concurrency != nil {
		l.Concurrency = d.Concurrency.Max
	}
	for _, r := range d.Limit.Also {
		counts := "cost"
		if r.Counts == throttle.CountsCalls {
			counts = "calls"
		}
		l.Also = append(l.Also, alsoLimits{Rate: r.Rate, Per: cmp.Or(r.Per, time.Second), Burst: max(r.Burst, 1), Counts: counts})
	}
	return l
}

// String writes l as the policy file would, for the log and the page.
func (l limits) String() string {
	s := fmt.Sprintf("rate %d/%v, burst %d", l.Rate, l.Per, l.Burst)
	if l.Concurrency > 0 {
		s += fmt.Sprintf(", concurrency %d", l.Concurrency)
	}
	for _, a := range l.Also {
		s += fmt.Sprintf(", also %d/%v burst %d (%s)", a.Rate, a.Per, a.Burst, a.Counts)
	}
	if l.PerTenant {
		s += ", per tenant"
	}
	return s
}

// slower reports whether rate a per pa is below rate b per pb.
func slower(a int64, pa time.Duration, b int64, pb time.Duration) bool {
	return float64(a)/float64(pa) < float64(b)/float64(pb)
}

// strictest returns own bound by other: each limit the lower of the two.
// A downstream that other paces per tenant and own does not (or the
// reverse) is another quota: own stands. So does an also list of another
// shape.
func strictest(own, other limits) limits {
	if own.PerTenant != other.PerTenant {
		return own
	}
	if slower(other.Rate, other.Per, own.Rate, own.Per) {
		own.Rate, own.Per = other.Rate, other.Per
	}
	own.Burst = min(own.Burst, other.Burst)
	if other.Concurrency > 0 && (own.Concurrency == 0 || other.Concurrency < own.Concurrency) {
		own.Concurrency = other.Concurrency
	}
	if len(own.Also) == len(other.Also) {
		also := slices.Clone(own.Also)
		for i, a := range other.Also {
			if a.Counts != also[i].Counts {
				return own
			}
			if slower(a.Rate, a.Per, also[i].Rate, also[i].Per) {
				also[i].Rate, also[i].Per = a.Rate, a.Per
			}
			also[i].Burst = min(also[i].Burst, a.Burst)
		}
		own.Also = also
	}
	return own
}

// bind returns d paced at l (from strictest of d's own limits).
func bind(d queue.Downstream, l limits) queue.Downstream {
	d.Limit.Rate, d.Limit.Per, d.Limit.Burst = l.Rate, l.Per, l.Burst
	if d.Concurrency != nil && l.Concurrency > 0 {
		c := *d.Concurrency
		c.Max = l.Concurrency
		d.Concurrency = &c
	} else if d.Concurrency == nil && l.Concurrency > 0 {
		d.Concurrency = &throttle.Concurrency{Name: d.Limit.Name, Max: l.Concurrency}
	}
	if len(l.Also) == len(d.Limit.Also) {
		d.Limit.Also = slices.Clone(d.Limit.Also)
		for i, a := range l.Also {
			d.Limit.Also[i].Rate, d.Limit.Also[i].Per, d.Limit.Also[i].Burst = a.Rate, a.Per, a.Burst
		}
	}
	return d
}

// tighter reports whether any downstream of old is paced more strictly
// in next: a lower rate, a smaller burst or concurrency cap, a lower also
// rate.
func tighter(old, next map[string]queue.Downstream) bool {
	for name, o := range old {
		n, ok := next[name]
		if !ok {
			continue
		}
		ol, nl := limitsOf(o), limitsOf(n)
		if slower(nl.Rate, nl.Per, ol.Rate, ol.Per) || nl.Burst < ol.Burst ||
			(nl.Concurrency > 0 && (ol.Concurrency == 0 || nl.Concurrency < ol.Concurrency)) {
			return true
		}
		for i := range min(len(ol.Also), len(nl.Also)) {
			if slower(nl.Also[i].Rate, nl.Also[i].Per, ol.Also[i].Rate, ol.Also[i].Per) || nl.Also[i].Burst < ol.Also[i].Burst {
				return true
			}
		}
	}
	return false
}

// fingerprint is a short hash of a policy's limits on every downstream.
func fingerprint(all map[string]limits) string {
	b, _ := json.Marshal(all) // maps marshal in key order
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// policyEntry is one worker's entry in policyKey.
type policyEntry struct {
	Fingerprint string            `json:"fp"`
	Limits      map[string]limits `json:"limits"`
	// Since is when the worker took this policy up (started or
	// reloaded), Seen when it last wrote the entry: Unix milliseconds.
	Since int64  `json:"since"`
	Seen  int64  `json:"seen"`
	Host  string `json:"host"`
}

// policyState is the policy a worker runs by: the file's, and the
// downstreams as the fleet binds them. Replaced whole, never changed.
type policyState struct {
	pol      *policy.Config
	own      map[string]limits                  // the file's limits by downstream
	fp       string                             // fingerprint(own)
	since    time.Time                          // when this worker took it up
	bound    map[string]queue.Downstream        // the file's downstreams at the fleet's limits
	stricter map[string]string                  // downstreams bound below the file: why, for the page
	fleet    []fleetPolicy                      // the live fingerprints, this worker's first
	names    []string                           // the downstreams' names, sorted, for the page
	tenants  func(id string) queue.TenantPolicy // the file's tenants, for admission
}

// fleetPolicy is one fingerprint of the live fleet.
type fleetPolicy struct {
	Fingerprint string
	Workers     []string // their names, host:pid
	Since       time.Time
	Diff        []string // how its limits differ from this worker's file
}

func newPolicyState(pol *policy.Config, since time.Time) *policyState {
	st := &policyState{pol: pol, own: map[string]limits{}, since: since, bound: pol.Downstreams}
	for name, d := range pol.Downstreams {
		st.own[name] = limitsOf(d)
	}
	st.fp = fingerprint(st.own)
	st.names = slices.Sorted(maps.Keys(pol.Downstreams))
	st.tenants = pol.QueueConfig().Tenants
	st.fleet = []fleetPolicy{{Fingerprint: st.fp, Since: since}}
	return st
}

// withFleet returns st bound by the live entries of others (field ->
// entry), as strictest says.
func (st *policyState) withFleet(self string, entries map[string]policyEntry) *policyState {
	next := *st
	next.bound = make(map[string]queue.Downstream, len(st.pol.Downstreams))
	next.stricter = map[string]string{}
	byFP := map[string]*fleetPolicy{st.fp: {Fingerprint: st.fp, Since: st.since, Workers: []string{self}}}
	for _, field := range slices.Sorted(maps.Keys(entries)) {
		e := entries[field]
		fp := byFP[e.Fingerprint]
		if fp == nil {
			fp = &fleetPolicy{Fingerprint: e.Fingerprint, Since: time.UnixMilli(e.Since), Diff: diffLimits(st.own, e.Limits)}
			byFP[e.Fingerprint] = fp
		}
		fp.Workers = append(fp.Workers, field)
		if since := time.UnixMilli(e.Since); since.Before(fp.Since) {
			fp.Since = since
		}
	}
	for name, d := range st.pol.Downstreams {
		l := st.own[name]
		for _, e := range entries {
			if other, ok := e.Limits[name]; ok && e.Fingerprint != st.fp {
				l = strictest(l, other)
			}
		}
		if !slices.Equal(l.Also, st.own[name].Also) || l.Rate != st.own[name].Rate || l.Per != st.own[name].Per ||
			l.Burst != st.own[name].Burst || l.Concurrency != st.own[name].Concurrency {
			next.bound[name] = bind(d, l)
			next.stricter[name] = l.String()
		} else {
			next.bound[name] = d
		}
	}
	next.fleet = []fleetPolicy{*byFP[st.fp]}
	delete(byFP, st.fp)
	others := slices.SortedFunc(maps.Values(byFP), func(a, b *fleetPolicy) int { return a.Since.Compare(b.Since) })
	for _, o := range others {
		next.fleet = append(next.fleet, *o)
	}
	return &next
}

// diffLimits says how theirs differs from ours, downstream by downstream.
func diffLimits(ours, theirs map[string]limits) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(ours)) {
		o := ours[name]
		t, ok := theirs[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("downstreams.%s: %s here, absent there", name, o))
		case o.String() != t.String():
			out = append(out, fmt.Sprintf("downstreams.%s: %s here, %s there", name, o, t))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(theirs)) {
		if _, ok := ours[name]; !ok {
			out = append(out, fmt.Sprintf("downstreams.%s: absent here, %s there", name, theirs[name]))
		}
	}
	return out
}

// workerName names this process in the fleet's entries.
func workerName() string {
	host, _ := os.Hostname()
	return cmp.Or(host, "unknown") + ":" + strconv.Itoa(os.Getpid()) + ":" + randomSuffix()
}

func randomSuffix() string {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "0"
	}
	return hex.EncodeToString(b[:])
}

// policyFleet publishes this worker's policy and binds it by the fleet's.
type policyFleet struct {
	client       redis.UniversalClient
	queue        string
	self         string
	key          string
	fingerprints prometheus.Gauge
	warned       string // the fingerprints last warned about, sorted and joined
}

func newPolicyFleet(client redis.UniversalClient, queueName string, reg prometheus.Registerer) (*policyFleet, error) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_policy_fingerprints",
		Help: "Distinct policies (fingerprints of their limits) among the queue's live workers, as this worker last read them: 1 when the fleet agrees; above 1, each downstream is paced at the strictest of them (docs/operations.md)."})
	if err := reg.Register(g); err != nil {
		return nil, err
	}
	g.Set(1)
	return &policyFleet{client: client, queue: queueName, self: workerName(), key: policyKey(queueName), fingerprints: g}, nil
}

// beat writes st's entry (when write), reads the others' live ones and
// returns st bound by them; entries older than policyTTL are deleted.
func (f *policyFleet) beat(ctx context.Context, st *policyState, write bool) (*policyState, error) {
	now := time.Now()
	if write {
		b, err := json.Marshal(policyEntry{Fingerprint: st.fp, Limits: st.own, Since: st.since.UnixMilli(), Seen: now.UnixMilli(), Host: f.self})
		if err != nil {
			return st, err
		}
		pipe := f.client.Pipeline()
		pipe.HSet(ctx, f.key, f.self, b)
		pipe.Expire(ctx, f.key, 2*policyTTL)
		if _, err := pipe.Exec(ctx); err != nil {
			return st, fmt.Errorf("sluice: publishing the policy's fingerprint: %w", err)
		}
	}
	all, err := f.client.HGetAll(ctx, f.key).Result()
	if err != nil {
		return st, fmt.Errorf("sluice: reading the fleet's policies: %w", err)
	}
	live := map[string]policyEntry{}
	var stale []string
	for field, v := range all {
		if field == f.self {
			continue
		}
		var e policyEntry
		if json.Unmarshal([]byte(v), &e) != nil || now.Sub(time.UnixMilli(e.Seen)) > policyTTL {
			stale = append(stale, field)
			continue
		}
		live[field] = e
	}
	if len(stale) > 0 {
		f.client.HDel(ctx, f.key, stale...) // the next beat tries again
	}
	return st.withFleet(f.self, live), nil
}

// announce tells the other workers that this one's entry changed.
func (f *policyFleet) announce(ctx context.Context) error {
	return f.client.Publish(ctx, policyChannel(f.queue), f.self).Err()
}

// leave deletes this worker's entry: a worker that stops binds nobody.
func (f *policyFleet) leave(ctx context.Context) {
	f.client.HDel(ctx, f.key, f.self)
	f.client.Publish(ctx, policyChannel(f.queue), f.self)
}

// report logs, once per change, a fleet of workers that disagree, and
// sets the gauge.
func (f *policyFleet) report(st *policyState, log interface {
	Warn(msg string, args ...any)
	Info(msg string, args ...any)
}) {
	f.fingerprints.Set(float64(len(st.fleet)))
	fps := make([]string, len(st.fleet))
	for i, p := range st.fleet {
		fps[i] = p.Fingerprint
	}
	slices.Sort(fps)
	key := strings.Join(fps, ",")
	if key == f.warned {
		return
	}
	prev := f.warned
	f.warned = key
	if len(st.fleet) == 1 {
		if prev != "" && strings.Contains(prev, ",") {
			log.Info("sluice: the fleet's workers agree on one policy again", "fingerprint", st.fp)
		}
		return
	}
	for _, p := range st.fleet[1:] {
		log.Warn("sluice: workers of this queue run another policy; each downstream is paced at the strictest of the live policies' limits",
			"fingerprint", st.fp, "other", p.Fingerprint, "other_workers", strings.Join(p.Workers, ","), "difference", strings.Join(p.Diff, "; "))
	}
	for _, name := range slices.Sorted(maps.Keys(st.stricter)) {
		log.Warn("sluice: a downstream is paced below this worker's policy file while the fleet disagrees", "downstream", name, "paced_at", st.stricter[name])
	}
}

// errPolicyChange is wrapped by Reload's error for a file whose change
// needs a restart.
var errPolicyChange = errors.New("needs a restart")

// resolveHTTP is the built-in HTTP job's Resolve: the downstream of the
// running policy, at the fleet's limits.
func (w *Worker) resolveHTTP(job *queue.Job, rawURL string) (queue.Downstream, error) {
	st := w.state.Load()
	d, err := st.pol.ResolveHTTP(job, rawURL)
	if err == nil {
		if b, ok := st.bound[d.Name]; ok {
			d = b
		}
	}
	return d, err
}

// beatPolicy publishes (when write) and reads the fleet's policies, and
// takes up the limits they bind this worker to.
func (w *Worker) beatPolicy(ctx context.Context, write bool) error {
	w.reloads.Lock()
	defer w.reloads.Unlock()
	return w.beatLocked(ctx, w.state.Load(), write)
}

func (w *Worker) beatLocked(ctx context.Context, st *policyState, write bool) error {
	next, err := w.pfleet.beat(ctx, st, write)
	prev := w.state.Swap(next)
	switch {
	case w.server == nil:
	case tighter(prev.bound, next.bound):
		// The slots booked at the old limits (up to a second ahead)
		// are booked again at the new ones (queue.Server.Tighten).
		w.server.Tighten()
	}
	w.pfleet.report(next, w.log)
	return err
}

// policyLoop beats every policyBeat, and reads the fleet's policies again
// when another worker says its own changed, until ctx ends; then this
// worker's entry is deleted.
func (w *Worker) policyLoop(ctx context.Context) {
	ps := w.client.Subscribe(ctx, policyChannel(w.policy.Queue.Name))
	defer ps.Close()
	msgs := ps.Channel()
	tick := time.NewTicker(policyBeat)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			w.pfleet.leave(lctx)
			cancel()
			return
		case <-tick.C:
			err = w.beatPolicy(ctx, true)
		case m, ok := <-msgs:
			if !ok {
				return
			}
			if m.Payload == w.pfleet.self {
				continue
			}
			err = w.beatPolicy(ctx, false)
		}
		if err != nil && ctx.Err() == nil {
			w.log.Warn("sluice: the fleet's policies", "err", err)
		}
	}
}

// Reload makes pol the worker's policy while it runs: its downstreams
// (limits, base URLs, headers, timeouts) and its tenants' admission
// apply to the next job, published to the fleet first. A change of the
// queue section or the schedules needs a restart: Reload refuses such a
// policy with an error naming what changed, and keeps the running one.
// Call it after Run has started (before, New's policy stands).
func (w *Worker) Reload(ctx context.Context, pol *policy.Config) error {
	if pol == nil {
		return fmt.Errorf("%w: Reload: nil policy", ErrConfig)
	}
	w.reloads.Lock()
	defer w.reloads.Unlock()
	old := w.state.Load().pol
	var changed []string
	if !reflect.DeepEqual(old.Queue, pol.Queue) {
		changed = append(changed, "queue")
	}
	if !reflect.DeepEqual(scheduleText(old.Schedules), scheduleText(pol.Schedules)) {
		changed = append(changed, "schedules")
	}
	if len(changed) > 0 {
		return fmt.Errorf("sluice: reload refused: the %s section %w; the running policy stands", strings.Join(changed, " and "), errPolicyChange)
	}
	w.mu.Lock()
	known, err := pol.WithTypes(w.types...)
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sluice: reload refused: %w", err)
	}
	if !w.started.Load() {
		return fmt.Errorf("%w: Reload before Run has started the worker", ErrConfig)
	}
	st := newPolicyState(pol, time.Now())
	// Published and announced before it binds this worker: the others
	// take a lower rate up within a round trip.
	err = w.beatLocked(ctx, st, true)
	w.pfleet.announce(ctx)
	w.known.Store(known)
	w.log.Info("sluice: policy reloaded", "fingerprint", st.fp, "downstreams", len(pol.Downstreams), "tenants", len(pol.Tenants))
	if err != nil {
		w.log.Warn("sluice: the reloaded policy could not be published to the fleet; the next beat tries again", "err", err)
	}
	return nil
}

// scheduleText is the schedules as compared by Reload.
func scheduleText(s []policy.Schedule) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ReloadFile reloads the worker's PolicyFile (Reload), as the worker
// command does on SIGHUP. A file that does not load is refused: every
// problem is logged, one line each, and the running policy stands.
func (w *Worker) ReloadFile(ctx context.Context) error {
	if w.cfg.PolicyFile == "" {
		return fmt.Errorf("%w: ReloadFile: the worker has no PolicyFile", ErrConfig)
	}
	pol, err := policy.Load(w.cfg.PolicyFile)
	if err != nil {
		var list policy.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				w.log.Error("sluice: reload refused: policy file problem", "problem", e.Error())
			}
		}
		w.log.Error("sluice: reload refused; the running policy stands", "file", w.cfg.PolicyFile, "problems", max(len(list), 1))
		return err
	}
	if err := w.Reload(ctx, pol); err != nil {
		w.log.Error("sluice: reload refused; the running policy stands", "file", w.cfg.PolicyFile, "err", err)
		return err
	}
	return nil
}
