// Package queue is sluice's bounded, fair job queue on asynq.
//
// A Producer admits each job by its tenant's policy (package algorithms)
// and adds it to a waiting room in Redis in one atomic script, against an
// exact bound on the queue and optionally on each tenant's backlog. A
// refusal is a typed error that says when to retry (RateLimitedError,
// QueueFullError, DuplicateJobError).
//
// A Server runs asynq's server with a dispatcher beside it, which hands
// jobs to asynq round-robin over the tenants with work (weighted),
// skipping a tenant whose throttle has no slot soon, and only as fast as
// the workers take them. Before a handler runs, its job takes its
// throttle slot; a job whose slot is too far away goes back to the
// waiting room without spending a retry. Delivery is at least once.
// docs/queue.md and docs/fairness.md describe the design and its bounds.
package queue

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/names"
)

// Limits on jobs.
const (
	// MaxTenantLen is the longest tenant id accepted, in bytes.
	MaxTenantLen = 1024
	// MaxTypeLen is the longest job type accepted, in bytes.
	MaxTypeLen = 256
	// MaxIDLen is the longest job id accepted, in bytes.
	MaxIDLen = 128
	// DefaultMaxPayload is the largest payload accepted unless the
	// Producer's config says otherwise.
	DefaultMaxPayload = 1 << 20
	// MaxDelay is the furthest ahead of its enqueue a job's RunAt may be.
	MaxDelay = 366 * 24 * time.Hour
	// MaxCost is the largest cost accepted: algorithms.MaxLimit, the
	// largest limit or burst of any admission policy or downstream, so
	// that no cost above it could ever be admitted or paced.
	MaxCost = algorithms.MaxLimit
)

// Job is one unit of work.
type Job struct {
	// ID identifies the job; a random one is chosen when empty. At most
	// MaxIDLen bytes of [A-Za-z0-9_.:-]. Until a job starts (waiting in
	// the waiting room, handed to asynq, and again whenever it is put
	// back), Enqueue refuses another job of its tenant with the same ID
	// (*DuplicateJobError), so that a producer that lost an answer may
	// send the job again. Once it has started, the ID may be used again,
	// by a separate job (docs/queue.md, Job ids). Handlers that must not act
	// twice should use ScopedID as an idempotency key.
	ID string `json:"id"`
	// Tenant is whose job it is: admission, backlog bounds and the fair
	// drain are per tenant. Required; any valid UTF-8 text (braces,
	// colons and spaces included) in Unicode normalization form C (NFC),
	// at most MaxTenantLen bytes.
	Tenant string `json:"tenant"`
	// Type selects the handler. Required.
	Type string `json:"type"`
	// Payload is the handler's input.
	Payload []byte `json:"payload,omitempty"`
	// Downstream names the throttled API the job calls, if any: its slot
	// is taken before the handler runs.
	Downstream string `json:"downstream,omitempty"`
	// Cost is the job's weight for its tenant's admission, and for the
	// downstream's throttle unless Units is set. Default 1; at most
	// MaxCost.
	Cost int64 `json:"cost,omitempty"`
	// Units is what the job's call books on its downstream's throttle
	// (tokens, query points), when that differs from Cost: so that a
	// tenant admitted at "60 jobs a minute" (Cost 1) can call an API
	// limited in tokens a minute (Units: the call's estimate). Zero: Cost.
	// At most MaxCost. When the call reports its real cost, the handler
	// settles the slot to it (Settle).
	Units int64 `json:"units,omitempty"`
	// MaxRetry is how many times a failing job is retried (asynq's
	// MaxRetry). Throttling never spends one. Default 25; -1 means none;
	// at most math.MaxInt32-1 (asynq holds an int32, and the queue hands
	// a job over with one retry spare: docs/queue.md, The worker).
	MaxRetry int `json:"max_retry,omitempty"`
	// Timeout bounds one run of the handler. Default 30 minutes. asynq
	// keeps it in whole seconds: it is rounded up to the next second.
	Timeout time.Duration `json:"timeout,omitempty"`
	// RunAt, when later than the enqueue, is when the job becomes due: it
	// waits apart from its tenant's list until then, holding none of the
	// tenant's other jobs back, and then joins the tail of that list to
	// take its tenant's normal turn. It counts against the queue's Bound
	// from the moment it is accepted. At most MaxDelay ahead; zero or a
	// past time: due at once. (docs/queue.md, Jobs for later)
	RunAt time.Time `json:"run_at,omitzero"`

	// Set by the queue. nonce is random for each accepted enqueue: with
	// the ID it names the job's asynq tasks (taskID). moves counts
	// hand-overs to asynq; refused, the downstream's refusals (Refused).
	nonce      string
	enqueuedAt time.Time
	retried    int
	moves      int
	refused    int
	class      string
	// idRecorded: its caller chose its id, so the ids hash counts the job
	// while it waits, and its id is held while it is handed over until it
	// starts. holding: this run of the job holds it still.
	idRecorded, holding bool
	// tenantEnc is the encoded tenant, set by the server when it runs
	// the job.
	tenantEnc string
	// trace is the W3C traceparent of the job's enqueue span ("": not
	// traced; trace.go).
	trace string
}

// EnqueuedAt is when the Producer accepted the job.
func (j *Job) EnqueuedAt() time.Time { return j.enqueuedAt }

// Retried counts the job's failed runs so far.
func (j *Job) Retried() int { return j.retried }

// Refusals counts the times the job's downstream refused it so far
// (handlers that returned Refused).
func (j *Job) Refusals() int { return j.refused }

// Class is the job's metrics class: its tenant's at enqueue, "default" if
// none.
func (j *Job) Class() string { return cmp.Or(j.class, defaultClass) }

// Errors. Errors with details wrap these; test with errors.Is.
var (
	// ErrInvalidJob is wrapped by every validation error; nothing was
	// enqueued.
	ErrInvalidJob = errors.New("sluice: invalid job")
	// ErrRateLimited is wrapped by *RateLimitedError.
	ErrRateLimited = errors.New("sluice: rate limited")
	// ErrQueueFull is wrapped by *QueueFullError.
	ErrQueueFull = errors.New("sluice: queue full")
	// ErrDuplicateJob is wrapped by *DuplicateJobError.
	ErrDuplicateJob = errors.New("sluice: duplicate job")
	// ErrRefusedTooOften is wrapped by the error of a job archived because
	// its downstream refused it MaxRefusals times (Refused).
	ErrRefusedTooOften = errors.New("sluice: refused by its downstream too often")
)

// RateLimitedError: the tenant's admission policy refused the job.
type RateLimitedError struct {
	Tenant   string
	Policy   algorithms.Policy
	Decision algorithms.Decision // Limit, Remaining, ResetAfter, RetryAfter
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("%v: tenant %.64q by %s; retry after %v", ErrRateLimited, e.Tenant, e.Policy, e.Decision.RetryAfter)
}

// Unwrap returns ErrRateLimited.
func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// QueueFullError: the queue (or, when Tenant is set, the tenant's backlog)
// is at its bound. Back off and retry; the depth falls as jobs start.
type QueueFullError struct {
	Queue  string
	Tenant string // set when the tenant's own bound refused the job
	// Shard is the asynq queue of the tenant's shard when the queue has
	// several (Config.Shards); Depth and Bound are then the shard's.
	Shard string
	Depth int64
	Bound int64
}

func (e *QueueFullError) Error() string {
	if e.Tenant != "" {
		return fmt.Sprintf("%v: tenant %.64q has %d of %d jobs waiting in queue %q", ErrQueueFull, e.Tenant, e.Depth, e.Bound, e.Queue)
	}
	if e.Shard != "" {
		return fmt.Sprintf("%v: shard %q of queue %q has %d of its %d jobs waiting (its share of the bound)", ErrQueueFull, e.Shard, e.Queue, e.Depth, e.Bound)
	}
	return fmt.Sprintf("%v: queue %q has %d of %d jobs waiting", ErrQueueFull, e.Queue, e.Depth, e.Bound)
}

// Unwrap returns ErrQueueFull.
func (e *QueueFullError) Unwrap() error { return ErrQueueFull }

// DuplicateJobError: a job of the same tenant with the same ID waits in
// the queue's waiting room, and will run. Nothing was written.
type DuplicateJobError struct {
	Queue  string
	Tenant string
	ID     string
}

func (e *DuplicateJobError) Error() string {
	return fmt.Sprintf("%v: a job with id %q is already waiting in queue %q for tenant %.64q", ErrDuplicateJob, e.ID, e.Queue, e.Tenant)
}

// Unwrap returns ErrDuplicateJob.
func (e *DuplicateJobError) Unwrap() error { return ErrDuplicateJob }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidJob, fmt.Sprintf(format, args...))
}

// validate checks what the caller set, before anything is written.
func (j *Job) validate(maxPayload int) error {
	switch {
	case j.Tenant == "":
		return invalid("tenant is required")
	case len(j.Tenant) > MaxTenantLen:
		return invalid("tenant id is %d bytes; the limit is %d", len(j.Tenant), MaxTenantLen)
	case !utf8.ValidString(j.Tenant):
		// The envelope is JSON, which would replace each bad byte by
		// U+FFFD and so hand the job over under another tenant's id.
		return invalid("tenant id is not valid UTF-8")
	case !norm.NFC.IsNormalString(j.Tenant):
		// "café" written with a combining accent (NFD) and with é (NFC)
		// look the same and would be two tenants, the one that a policy
		// names and one it does not.
		return invalid("tenant id %+.64q is not in Unicode normalization form C (NFC); normalise it first (as %+.64q)", j.Tenant, norm.NFC.String(j.Tenant))
	case j.Type == "":
		return invalid("type is required")
	case !names.Valid(j.Type, MaxTypeLen, ":/"):
		return invalid("type %.64q: use at most %d bytes of letters, digits and _.:-/", j.Type, MaxTypeLen)
	case j.ID != "" && !names.Valid(j.ID, MaxIDLen, ":"):
		return invalid("id %.64q: use at most %d bytes of letters, digits and _.:-", j.ID, MaxIDLen)
	case len(j.Payload) > maxPayload:
		return invalid("payload is %d bytes; the limit is %d", len(j.Payload), maxPayload)
	case j.Downstream != "" && !names.Valid(j.Downstream, names.MaxLen, ""):
		return invalid("downstream %.64q: use at most 64 bytes of letters, digits and _.-", j.Downstream)
	case j.Cost < 0:
		return invalid("cost must not be negative, got %d", j.Cost)
	case j.Cost > MaxCost:
		return invalid("cost must be at most %d (the largest limit or burst a policy may have), got %d", int64(MaxCost), j.Cost)
	case j.Units < 0:
		return invalid("units must not be negative, got %d", j.Units)
	case j.Units > MaxCost:
		return invalid("units must be at most %d (the largest limit or burst a policy may have), got %d", int64(MaxCost), j.Units)
	case j.MaxRetry < -1:
		return invalid("max_retry must be -1 (none) or more, got %d", j.MaxRetry)
	case j.MaxRetry > math.MaxInt32-1:
		// asynq keeps it, plus the spare, as an int32: 2^31 would read as
		// negative.
		return invalid("max_retry must be at most %d, got %d", math.MaxInt32-1, j.MaxRetry)
	case j.Timeout < 0:
		return invalid("timeout must not be negative, got %v", j.Timeout)
	case time.Until(j.RunAt) > MaxDelay:
		return invalid("run_at %s is more than %v ahead", j.RunAt.UTC().Format(time.RFC3339), MaxDelay)
	}
	return nil
}

func (j *Job) cost() int64 { return max(j.Cost, 1) }

// units is what the job books on its downstream's throttle: Units, else
// its cost.
func (j *Job) units() int64 {
	if j.Units > 0 {
		return j.Units
	}
	return j.cost()
}

// maxRetry is MaxRetry as asynq takes it: 25 by default, 0 for none.
func (j *Job) maxRetry() int {
	if j.MaxRetry == 0 {
		return 25
	}
	return max(j.MaxRetry, 0)
}

// defaultClass is the metrics class of tenants whose policy names none.
// The scripts spell it too: they keep no count of it in the per-class
// hash (Stats derives it from the depth).
const defaultClass = "default"

// timeout is the job's timeout as its asynq task holds it: in whole
// seconds, rounded up, so that none is cut short and one under a second
// is not written as none.
func (j *Job) timeout() time.Duration {
	if j.Timeout <= 0 {
		return 30 * time.Minute
	}
	s := j.Timeout / time.Second
	if j.Timeout%time.Second != 0 {
		s++
	}
	return s * time.Second
}

// ScopedID is the job's id within its tenant: <encoded tenant>/<id>, the
// tenant encoded as in key names (package keyspace). Two tenants' jobs
// never share one, and it is a safe HTTP header value: the built-in
// sluice.http job sends it as its default Idempotency-Key. A job without
// a tenant (never one a Producer accepted) has its bare id.
func (j *Job) ScopedID() string {
	enc, err := keyspace.Encode(j.Tenant)
	if err != nil {
		return j.ID
	}
	return enc + "/" + j.ID
}

// taskID is the asynq task id of the job's current hand-over,
// sluice:<scoped id>@<nonce>:<moves>: no other hand-over, even of a job
// of the same ID, shares it.
func (j *Job) taskID() string {
	return "sluice:" + j.ScopedID() + "@" + j.nonce + ":" + strconv.Itoa(j.moves)
}

// envelope is a job as its asynq task's payload carries it, inside the
// job's waiting-room entry (item): JSON of the fields a producer sets and
// of those the queue sets.
type envelope struct {
	Job
	Nonce      string    `json:"nonce,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	Retried    int       `json:"retried,omitempty"`
	Moves      int       `json:"moves,omitempty"`
	Refused    int       `json:"refused,omitempty"`
	Class      string    `json:"class,omitempty"`
	IDRecorded bool      `json:"id_recorded,omitempty"`
	Trace      string    `json:"trace,omitempty"`
}

// encode writes the job's envelope.
func (j *Job) encode() (string, error) {
	b, err := json.Marshal(envelope{Job: *j, Nonce: j.nonce, EnqueuedAt: j.enqueuedAt, Retried: j.retried, Moves: j.moves, Refused: j.refused, Class: j.class, IDRecorded: j.idRecorded, Trace: j.trace})
	return string(b), err
}

// decodeJob decodes an envelope.
func decodeJob(s []byte) (*Job, error) {
	var e envelope
	if err := json.Unmarshal(s, &e); err != nil {
		return nil, fmt.Errorf("sluice: undecodable job envelope: %w", err)
	}
	j := e.Job
	j.nonce, j.enqueuedAt, j.retried, j.moves, j.refused, j.class, j.idRecorded = e.Nonce, e.EnqueuedAt, e.Retried, e.Moves, e.Refused, e.Class, e.IDRecorded
	j.trace = e.Trace
	if j.ID == "" || j.Tenant == "" || j.Type == "" {
		return nil, errors.New("sluice: job envelope lacks id, tenant or type")
	}
	return &j, nil
}
