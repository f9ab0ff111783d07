package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/scripts"
	"github.com/sluicehq/sluice/throttle"
)

// Errors of the Inspector.
var (
	// ErrJobNotFound: no job of that id is known for the tenant. sluice
	// forgets a job once it completes (a fifth of a second after, in
	// batches), and when it is deleted.
	ErrJobNotFound = errors.New("sluice: no such job")
	// ErrHandedOver: the job has left the waiting room for asynq
	// (pending, running, retrying, archived): asynq's tools apply to it
	// (asynqmon at /monitoring/, the asynq CLI), by its task id.
	ErrHandedOver = errors.New("sluice: job handed over to asynq")
	// ErrNotDelayed: Cancel was asked for a job that is due already (it
	// waits in its tenant's list: Delete removes it).
	ErrNotDelayed = errors.New("sluice: job is not waiting for a later time")
)

// HandedOverError is the error of an edit of a job that asynq holds now;
// it wraps ErrHandedOver.
type HandedOverError struct {
	// Queue is the asynq queue (the tenant's shard's) and TaskID the
	// task's id, which asynqmon and the asynq CLI take.
	Queue, TaskID string
}

func (e *HandedOverError) Error() string {
	return fmt.Sprintf("%v: use asynq's tools on task %q of queue %q (asynqmon at /monitoring/, or asynq task ls/archive/delete)", ErrHandedOver, e.TaskID, e.Queue)
}

// Unwrap returns ErrHandedOver.
func (e *HandedOverError) Unwrap() error { return ErrHandedOver }

// JobState is where a job is.
type JobState string

// Job states.
const (
	// StateWaiting: in its tenant's list of the waiting room.
	StateWaiting JobState = "waiting"
	// StateLater: waiting apart until it is due (Job.RunAt).
	StateLater JobState = "later"
	// StatePending: handed over to asynq, waiting for a worker.
	StatePending JobState = "pending"
	// StateRunning: a worker runs it.
	StateRunning JobState = "running"
	// StateRetrying: it failed, and asynq runs it again at NextRun.
	StateRetrying JobState = "retrying"
	// StateArchived: asynq archived it (LastError says why).
	StateArchived JobState = "archived"
	// StateCompleted: it succeeded, and asynq keeps it (Retention).
	StateCompleted JobState = "completed"
	// StateUnknown: its record names a task found neither in the waiting
	// room near its place nor in asynq: it completed a moment ago, or
	// was deleted with asynq's tools.
	StateUnknown JobState = "unknown"
)

// Wait is one reason a job waits, and until when when that is known.
type Wait struct {
	// Kind is what holds it: "turn" (jobs of its tenant ahead of it, or
	// its tenant's turn of the round-robin), "due" (a job for later),
	// "asleep" (its tenant is skipped until Until; Detail says why:
	// "slot: ...", "pause: ...", "lease: ...", "rescheduled: ..."),
	// "bucket" (its downstream's bucket has no slot before Until),
	// "pause" (its downstream is paused after a 429 or 503), "lease"
	// (every concurrency lease of its downstream is held), "marked" (a
	// worker marked its throttle key full until Until).
	Kind string `json:"kind"`
	// Until is when this reason ends; zero when it cannot be known.
	Until time.Time `json:"until,omitzero"`
	// Detail says it in words, naming the bucket, the downstream or the
	// reason a worker gave.
	Detail string `json:"detail"`
}

// JobInfo is what the Inspector knows of one job.
type JobInfo struct {
	// ID and Tenant are the job's.
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// State is where it is.
	State JobState `json:"state"`
	// Why says where it is and why it waits, in one line.
	Why string `json:"why"`
	// Waits are the reasons it waits, in the order they hold it.
	Waits []Wait `json:"waits,omitempty"`
	// StartsAt is when it should start, an estimate from what holds it
	// now (its tenant's pace for the jobs ahead of it); zero when none
	// can be made (handed over, or nothing known paces it).
	StartsAt time.Time `json:"starts_at,omitzero"`
	// Ahead counts the jobs of its tenant ahead of it in its list;
	// AheadExact is false when Ahead is an estimate (the job was not
	// found near the place its sequence number gives it). Backlog is the
	// length of that list.
	Ahead      int64 `json:"ahead"`
	AheadExact bool  `json:"ahead_exact"`
	Backlog    int64 `json:"backlog"`
	// Due is when a job for later becomes due.
	Due time.Time `json:"due,omitzero"`
	// Type and Downstream are the job's, when its entry or task was read.
	Type       string `json:"type,omitempty"`
	Downstream string `json:"downstream,omitempty"`
	// Queue and TaskID name its asynq task (the current hand-over's, or
	// the next's while it waits).
	Queue  string `json:"queue"`
	TaskID string `json:"task_id"`
	// Retried, LastError and NextRun are asynq's, for a task asynq holds.
	Retried   int       `json:"retried,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	NextRun   time.Time `json:"next_run,omitzero"`
	// CompletedAt is when a completed task finished.
	CompletedAt time.Time `json:"completed_at,omitzero"`
	// Now is Redis's clock at the look-up, which the times are on.
	Now time.Time `json:"now"`
}

// InspectorConfig configures an Inspector.
type InspectorConfig struct {
	// Queue, Prefix and Shards name the waiting room, as the producers'
	// Config does (the same defaults).
	Queue  string
	Prefix string
	Shards int
	// Throttle, with Downstreams, lets the Inspector read a job's
	// downstream's bucket, pause and leases (throttle.State); nil: it
	// says only what the waiting room holds.
	Throttle *throttle.Throttle
	// Downstreams returns the throttling of a downstream by name.
	Downstreams func(name string) (Downstream, bool)
	clock       func() time.Time // tests'
}

// Inspector answers, for one job, where it is, why it waits and until
// when, and lists and edits the waiting room: a tenant's waiting jobs and
// jobs for later, paged; a job for later cancelled, a waiting job
// deleted. It reads jobs handed over through asynq's own Inspector.
// Safe for concurrent use.
//
// What each call costs, whatever the depth (docs/operations.md, Why is
// my job not running?):
//
//   - Job: three or four round trips. One pipeline reads the job's record
//     in the jobs hash (its task id, its sequence number among its
//     tenant's enqueues and its due time: queue_enqueue.lua writes it),
//     the head of its tenant's list and its tenant's sleep; one reads the
//     head's record and two windows of the list (LRANGE): 64 entries
//     around the place the two sequence numbers give the job, and the
//     first 64; a job for later is read with ZRANGEBYSCORE of its due
//     time alone. Then either the throttle's state of its downstream
//     (throttle.State, one round trip) or asynq's GetTaskInfo (one).
//   - List: one LRANGE of the page (O(page)) for waiting jobs; for jobs
//     for later, which share one sorted set per shard with other
//     tenants, one ZRANGE by index of up to 10 pages' worth, filtered.
//   - Cancel, Delete: a Job's reads, then one script (queue_remove.lua)
//     whose LREM walks the list to the job (memory compares, no decoding).
type Inspector struct {
	client redis.UniversalClient
	cfg    InspectorConfig
	shards shards
	asynq  *asynq.Inspector
}

// NewInspector returns an Inspector on client for *cfg.
func NewInspector(client redis.UniversalClient, cfg *InspectorConfig) (*Inspector, error) {
	if client == nil {
		return nil, errors.New("sluice: queue.NewInspector: nil client")
	}
	var c InspectorConfig
	if cfg != nil {
		c = *cfg
	}
	room := Config{Queue: c.Queue, Prefix: c.Prefix, Shards: c.Shards, Bound: math.MaxInt64, clock: c.clock}
	if err := room.fill(); err != nil {
		return nil, err
	}
	c.Queue, c.Prefix, c.Shards = room.Queue, room.Prefix, room.Shards
	return &Inspector{client: client, cfg: c, shards: newShards(c.Prefix, c.Queue, c.Shards), asynq: asynq.NewInspectorFromRedisClient(client)}, nil
}

// record is a job's record in the jobs hash (queue_enqueue.lua):
// "<nonce>:<moves> <seq> <due µs>" under its scoped id.
type record struct {
	// task is the task id, sluice:<scoped id>@<nonce>:<moves>, and hand
	// its part the record keeps.
	task, hand string
	seq, due   int64
}

func parseRecord(scoped, s string) (record, bool) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return record{}, false
	}
	seq, err1 := strconv.ParseInt(f[1], 10, 64)
	due, err2 := strconv.ParseInt(f[2], 10, 64)
	return record{task: "sluice:" + scoped + "@" + f[0], hand: f[0], seq: seq, due: due}, err1 == nil && err2 == nil
}

// sameJob reports whether two task ids are hand-overs of one job: the
// same sluice:<scoped id>@<nonce>, whatever their moves.
func sameJob(a, b string) bool {
	cut := func(t string) string {
		if i := strings.LastIndexByte(t, ':'); i > strings.IndexByte(t, '@') {
			return t[:i]
		}
		return t
	}
	return cut(a) == cut(b)
}

// scopedOfTask returns the scoped id in a task id.
func scopedOfTask(task string) string {
	s, _ := strings.CutPrefix(task, "sluice:")
	s, _, _ = strings.Cut(s, "@")
	return s
}

// located is where a job was found.
type located struct {
	k               keys
	enc, list       string
	rec             record
	now             time.Time
	backlog         int64
	asleep          time.Time // zero: its tenant does not sleep
	why             string    // why its tenant sleeps
	member          bool      // its tenant is in the ring or asleep
	state           JobState  // StateWaiting, StateLater, or "" (not in the room)
	text            string    // the entry, or the later set's member
	job             *Job      // decoded from text
	ahead           int64
	exact, recorded bool
}

// window is how far either side of its expected place a job is looked
// for in its tenant's list, and how many of the list's first entries.
const window = 32

// locate finds a job in the waiting room, from its record.
func (in *Inspector) locate(ctx context.Context, tenant, id string) (*located, error) {
	k, enc, list, err := in.shards.tenant(tenant)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJob, err)
	}
	scoped := enc + "/" + id
	l := &located{k: k, enc: enc, list: list}
	pipe := in.client.Pipeline()
	rec := pipe.HGet(ctx, k.jobs, scoped)
	llen := pipe.LLen(ctx, list)
	head := pipe.LIndex(ctx, list, 0)
	sleep := pipe.ZScore(ctx, k.sleep, enc)
	why := pipe.HGet(ctx, k.why, enc)
	member := pipe.SIsMember(ctx, k.members, enc)
	ids := pipe.HGet(ctx, k.ids, scoped)
	tm := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if errors.Is(rec.Err(), redis.Nil) {
		return nil, fmt.Errorf("%w: tenant %.64q has no job %q in queue %q that has not completed (sluice forgets a job when it completes, or is deleted)", ErrJobNotFound, tenant, id, in.cfg.Queue)
	}
	r, ok := parseRecord(scoped, rec.Val())
	if !ok {
		return nil, fmt.Errorf("sluice: the record of job %q of tenant %.64q is unreadable: %q", id, tenant, rec.Val())
	}
	l.rec, l.backlog, l.member = r, llen.Val(), member.Val()
	l.now = tm.Val()
	if in.cfg.clock != nil {
		l.now = in.cfg.clock()
	}
	if s, err := sleep.Result(); err == nil {
		l.asleep = time.UnixMicro(int64(s))
		_, l.why, _ = strings.Cut(why.Val(), "\t")
	}
	n, _ := ids.Int64()
	l.recorded = n > 0
	// The head's record gives the head's sequence number: the job's
	// distance from it is about the jobs ahead of it.
	pipe = in.client.Pipeline()
	var headRec *redis.StringCmd
	headScoped := ""
	if h, _, ok := readEntry(head.Val()); ok {
		headScoped = scopedOfTask(h.task)
		headRec = pipe.HGet(ctx, k.jobs, headScoped)
	}
	var later *redis.StringSliceCmd
	if r.due > l.now.UnixMicro() {
		d := strconv.FormatInt(r.due, 10)
		later = pipe.ZRangeByScore(ctx, k.later, &redis.ZRangeBy{Min: d, Max: d})
	}
	first := pipe.LRange(ctx, list, 0, 2*window-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if later != nil {
		for _, m := range later.Val() {
			t, e, _ := strings.Cut(m, " ")
			if h, _, ok := readEntry(e); ok && t == enc && sameJob(h.task, r.task) {
				l.state, l.text = StateLater, m
				l.job, err = decodeItem(e)
				return l, err
			}
		}
	}
	est := int64(0)
	if headRec != nil {
		if hr, ok := parseRecord(headScoped, headRec.Val()); ok {
			est = max(r.seq-hr.seq, 0)
		}
	}
	l.ahead = min(est, max(l.backlog-1, 0))
	look := func(from int64, entries []string) bool {
		for i, e := range entries {
			if h, _, ok := readEntry(e); ok && sameJob(h.task, r.task) {
				l.state, l.text, l.ahead, l.exact = StateWaiting, e, from+int64(i), true
				return true
			}
		}
		return false
	}
	if !look(0, first.Val()) && est >= window {
		from := est - window
		entries, err := in.client.LRange(ctx, list, from, est+window).Result()
		if err != nil {
			return nil, err
		}
		look(from, entries)
	}
	if l.state != "" {
		l.job, err = decodeItem(l.text)
	}
	return l, err
}

// Job returns where the job id of tenant is and why it waits.
// It returns an error wrapping ErrJobNotFound for a job sluice does not
// know (or no longer: see ErrJobNotFound).
func (in *Inspector) Job(ctx context.Context, tenant, id string) (JobInfo, error) {
	l, err := in.locate(ctx, tenant, id)
	if err != nil {
		return JobInfo{}, err
	}
	info := JobInfo{ID: id, Tenant: tenant, Queue: l.k.queue, TaskID: l.rec.task, Now: l.now.UTC(), Backlog: l.backlog}
	if l.job != nil {
		info.Type, info.Downstream = l.job.Type, l.job.Downstream
	}
	switch l.state {
	case StateLater:
		info.State = StateLater
		info.Due = time.UnixMicro(l.rec.due).UTC()
		info.Waits = []Wait{{Kind: "due", Until: info.Due, Detail: "a job for later, due at " + stamp(info.Due)}}
		info.StartsAt = info.Due
		info.Why = fmt.Sprintf("due at %s (in %v); it then joins the tail of its tenant's list", stamp(info.Due), info.Due.Sub(l.now).Round(time.Millisecond))
		return info, nil
	case StateWaiting:
		info.State, info.Ahead, info.AheadExact = StateWaiting, l.ahead, true
		return in.waiting(ctx, l, info)
	}
	// Not in the room: asynq's.
	t, err := in.asynq.GetTaskInfo(l.k.queue, l.rec.task)
	if err != nil && !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return JobInfo{}, err
	}
	if t == nil {
		if l.recorded || (l.ahead > 0 && l.ahead < l.backlog) {
			// Its id is counted in the room, or its place is inside the
			// list: waiting, further from its expected place than the
			// windows reached (jobs deleted or put back ahead of it).
			info.State, info.Ahead = StateWaiting, l.ahead
			return in.waiting(ctx, l, info)
		}
		info.State = StateUnknown
		info.Why = fmt.Sprintf("task %s is neither in the waiting room near its place nor in asynq: it completed a moment ago, or was deleted with asynq's tools", l.rec.task)
		return info, nil
	}
	info.Type, info.Retried, info.LastError = t.Type, t.Retried, t.LastErr
	switch t.State {
	case asynq.TaskStatePending:
		info.State = StatePending
		info.StartsAt = l.now.UTC()
		info.Why = "handed over to asynq: waiting in its pending list for a worker (asynq's tools apply)"
	case asynq.TaskStateActive:
		info.State = StateRunning
		info.Why = "running on a worker"
	case asynq.TaskStateRetry, asynq.TaskStateScheduled:
		info.State, info.NextRun, info.StartsAt = StateRetrying, t.NextProcessAt.UTC(), t.NextProcessAt.UTC()
		info.Waits = []Wait{{Kind: "retry", Until: info.NextRun, Detail: "asynq retries it after: " + t.LastErr}}
		info.Why = fmt.Sprintf("retrying at %s after %d failed runs; the last: %s", stamp(info.NextRun), t.Retried, t.LastErr)
	case asynq.TaskStateArchived:
		info.State = StateArchived
		info.Why = "archived by asynq: " + t.LastErr
	case asynq.TaskStateCompleted:
		info.State, info.CompletedAt = StateCompleted, t.CompletedAt.UTC()
		info.Why = "completed at " + stamp(info.CompletedAt)
	default:
		info.State = StatePending
		info.Why = "held by asynq in state " + t.State.String()
	}
	return info, nil
}

// waiting fills in why a job in its tenant's list waits, and when it
// should start.
func (in *Inspector) waiting(ctx context.Context, l *located, info JobInfo) (JobInfo, error) {
	var waits []Wait
	if info.Ahead > 0 {
		approx := ""
		if !info.AheadExact {
			approx = "about "
		}
		waits = append(waits, Wait{Kind: "turn", Detail: fmt.Sprintf("behind %s%d jobs of its tenant (of %d waiting)", approx, info.Ahead, l.backlog)})
	}
	if !l.asleep.IsZero() && l.asleep.After(l.now) {
		waits = append(waits, Wait{Kind: "asleep", Until: l.asleep.UTC(), Detail: "its tenant is skipped until " + stamp(l.asleep) + ": " + l.why})
	} else if info.Ahead == 0 {
		waits = append(waits, Wait{Kind: "turn", Detail: "at the head of its tenant's list: its tenant's turn of the round-robin comes next"})
	}
	perSecond := 0.0
	if l.job != nil && l.job.Downstream != "" {
		dw, ps, err := in.downstreamWaits(ctx, l)
		if err != nil {
			return JobInfo{}, err
		}
		waits, perSecond = append(waits, dw...), ps
	}
	start := l.now
	for _, w := range waits {
		if w.Until.After(start) {
			start = w.Until
		}
	}
	switch {
	case info.Ahead == 0:
		info.StartsAt = start.UTC()
	case perSecond > 0:
		units := float64(max(l.job.units(), 1))
		info.StartsAt = start.Add(time.Duration(float64(info.Ahead) * units / perSecond * float64(time.Second))).UTC()
	}
	info.Waits = waits
	parts := make([]string, 0, len(waits)+1)
	parts = append(parts, "waiting in its tenant's list")
	for _, w := range waits {
		parts = append(parts, w.Detail)
	}
	info.Why = strings.Join(parts, "; ")
	if !info.StartsAt.IsZero() {
		info.Why += fmt.Sprintf("; should start at about %s (in %v)", stamp(info.StartsAt), info.StartsAt.Sub(l.now).Round(time.Millisecond))
	}
	return info, nil
}

// downstreamWaits reads what the job's downstream holds it by: a mark, a
// pause, its bucket's next slot, its leases; and its pace now, units a
// second (0: unknown).
func (in *Inspector) downstreamWaits(ctx context.Context, l *located) ([]Wait, float64, error) {
	job := l.job
	var waits []Wait
	marks, err := in.client.ZMScore(ctx, l.k.full, job.Downstream, job.Downstream+"/"+l.enc).Result()
	if err != nil {
		return nil, 0, err
	}
	until := time.UnixMicro(int64(max(marks[0], marks[1])))
	if until.After(l.now) {
		waits = append(waits, Wait{Kind: "marked", Until: until.UTC(), Detail: fmt.Sprintf("a worker marked downstream %s full until %s", job.Downstream, stamp(until))})
	}
	if in.cfg.Throttle == nil || in.cfg.Downstreams == nil {
		return waits, 0, nil
	}
	d, ok := in.cfg.Downstreams(job.Downstream)
	if !ok {
		return append(waits, Wait{Kind: "bucket", Detail: fmt.Sprintf("downstream %s is not in the policy: a worker will archive the job", job.Downstream)}), 0, nil
	}
	in.shards.place(job)
	key := ThrottleKey(job, d.PerTenant)
	st, err := in.cfg.Throttle.State(ctx, key, d.Limit)
	if err != nil {
		return nil, 0, err
	}
	bucket := key // the throttle key names the bucket
	// The throttle's times are on its clock, st.Now: move them to ours.
	at := func(t time.Time) time.Time { return l.now.Add(t.Sub(st.Now)) }
	switch {
	case st.Paused() > 0:
		waits = append(waits, Wait{Kind: "pause", Until: at(st.PausedUntil).UTC(), Detail: fmt.Sprintf("downstream %s is paused (a 429 or 503) until %s", job.Downstream, stamp(at(st.PausedUntil)))})
	case st.Next > 0:
		u := l.now.Add(st.Next)
		waits = append(waits, Wait{Kind: "bucket", Until: u.UTC(), Detail: fmt.Sprintf("bucket %s of downstream %s is full until %s (%.4g a second)", bucket, job.Downstream, stamp(u), st.PerSecond)})
	}
	if d.Concurrency != nil && st.Leases >= d.Concurrency.Max {
		waits = append(waits, Wait{Kind: "lease", Detail: fmt.Sprintf("all %d concurrency leases of downstream %s are held", d.Concurrency.Max, job.Downstream)})
	}
	return waits, st.PerSecond, nil
}

// stamp formats a time for Why.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// JobSummary is one job of a listing.
type JobSummary struct {
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	Downstream string    `json:"downstream,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// Position is the job's index in its tenant's list (0: next), for a
	// waiting job.
	Position int64 `json:"position"`
	// Due is when a job for later becomes due.
	Due time.Time `json:"due,omitzero"`
}

// ListOptions selects a page of a tenant's jobs.
type ListOptions struct {
	// Delayed lists the jobs for later instead of the waiting ones.
	Delayed bool
	// Cursor is the Next of the page before ("": the first page).
	Cursor string
	// Limit is the most jobs a page holds; default 100, at most 1,000.
	Limit int
}

// Page is one page of a listing.
type Page struct {
	Jobs []JobSummary `json:"jobs"`
	// Next is the cursor of the next page; "" after the last.
	Next string `json:"next,omitempty"`
	// Total is how many such jobs the tenant has.
	Total int64 `json:"total"`
}

// List returns a page of tenant's waiting jobs, in the order they will
// start, or of its jobs for later, soonest due first. A cursor is an
// index: jobs taken meanwhile shift the list, so that a page may repeat
// a job of the page before or, for jobs for later, skip one that became
// due.
func (in *Inspector) List(ctx context.Context, tenant string, o ListOptions) (Page, error) {
	k, enc, list, err := in.shards.tenant(tenant)
	if err != nil {
		return Page{}, fmt.Errorf("%w: %v", ErrInvalidJob, err)
	}
	limit := int64(o.Limit)
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	from := int64(0)
	if o.Cursor != "" {
		if from, err = strconv.ParseInt(o.Cursor, 10, 64); err != nil || from < 0 {
			return Page{}, fmt.Errorf("%w: cursor %.32q is not one a page gave", ErrInvalidJob, o.Cursor)
		}
	}
	pg := Page{Jobs: []JobSummary{}}
	if !o.Delayed {
		pipe := in.client.Pipeline()
		total := pipe.LLen(ctx, list)
		entries := pipe.LRange(ctx, list, from, from+limit-1)
		if _, err := pipe.Exec(ctx); err != nil {
			return Page{}, err
		}
		for i, e := range entries.Val() {
			pg.Jobs = append(pg.Jobs, summary(e, from+int64(i), time.Time{}))
		}
		pg.Total = total.Val()
		if next := from + int64(len(entries.Val())); next < pg.Total {
			pg.Next = strconv.FormatInt(next, 10)
		}
		return pg, nil
	}
	// Jobs for later share the shard's sorted set: look through up to
	// ten pages of it for the tenant's.
	pipe := in.client.Pipeline()
	total := pipe.HGet(ctx, k.ldepth, enc)
	zs := pipe.ZRangeWithScores(ctx, k.later, from, from+10*limit-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Page{}, err
	}
	pg.Total, _ = total.Int64()
	next := from
	for _, z := range zs.Val() {
		if int64(len(pg.Jobs)) == limit {
			break
		}
		next++
		m, _ := z.Member.(string)
		if t, e, _ := strings.Cut(m, " "); t == enc {
			pg.Jobs = append(pg.Jobs, summary(e, 0, time.UnixMicro(int64(z.Score)).UTC()))
		}
	}
	if int64(len(zs.Val())) == 10*limit || next < from+int64(len(zs.Val())) {
		pg.Next = strconv.FormatInt(next, 10)
	}
	return pg, nil
}

// summary is a listing's line of an entry.
func summary(e string, pos int64, due time.Time) JobSummary {
	j, err := decodeItem(e)
	if err != nil {
		return JobSummary{ID: "(no entry)", Type: undecodableType, Position: pos, Due: due}
	}
	return JobSummary{ID: j.ID, Type: j.Type, Downstream: j.Downstream, EnqueuedAt: j.enqueuedAt.UTC(), Position: pos, Due: due}
}

// Cancel removes a job for later of tenant before it is due. A job due
// already gets ErrNotDelayed (Delete removes it), one asynq holds a
// *HandedOverError.
func (in *Inspector) Cancel(ctx context.Context, tenant, id string) error {
	return in.remove(ctx, tenant, id, true)
}

// Delete removes a job of tenant from the waiting room, waiting or for
// later, keeping the room's counts exact (depth, per-class counts, ids).
// A job asynq holds gets a *HandedOverError: asynq's tools apply.
func (in *Inspector) Delete(ctx context.Context, tenant, id string) error {
	return in.remove(ctx, tenant, id, false)
}

func (in *Inspector) remove(ctx context.Context, tenant, id string, onlyLater bool) error {
	l, err := in.locate(ctx, tenant, id)
	if err != nil {
		return err
	}
	switch {
	case l.state == "":
		return &HandedOverError{Queue: l.k.queue, TaskID: l.rec.task}
	case onlyLater && l.state != StateLater:
		return fmt.Errorf("%w: job %q of tenant %.64q is due and waits in its tenant's list; delete it instead", ErrNotDelayed, id, tenant)
	}
	where := "list"
	if l.state == StateLater {
		where = "later"
	}
	recorded := ""
	if l.job.idRecorded {
		recorded = l.job.ScopedID()
	}
	n, err := scripts.QueueRemove.Run(ctx, in.client, []string{l.list, l.k.later, l.k.meta, l.k.cdepth, l.k.ids, l.k.ldepth, l.k.jobs},
		where, l.text, l.enc, l.job.Class(), recorded, l.job.ScopedID(), l.rec.hand).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return &HandedOverError{Queue: l.k.queue, TaskID: l.rec.task}
	}
	return nil
}
