package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// Handler processes jobs, in the shape of net/http's Handler: return nil
// when the job is done, an error to have it retried (spending one of its
// retries), Permanent(err) to archive it now, or Reschedule(d) to run it
// again after d without spending a retry.
type Handler interface {
	ProcessJob(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// ProcessJob calls f(ctx, job).
func (f HandlerFunc) ProcessJob(ctx context.Context, job *Job) error { return f(ctx, job) }

// Middleware wraps a Handler.
type Middleware func(Handler) Handler

// ServeMux routes jobs to handlers by Job.Type. Safe for concurrent use.
type ServeMux struct {
	mu sync.RWMutex
	m  map[string]Handler
	mw []Middleware
}

// NewServeMux returns an empty ServeMux.
func NewServeMux() *ServeMux { return &ServeMux{m: make(map[string]Handler)} }

// Handle registers h for jobs of type typ. It panics if typ is registered
// twice, as net/http's ServeMux does: that is a programming error.
func (mux *ServeMux) Handle(typ string, h Handler) {
	mux.mu.Lock()
	defer mux.mu.Unlock()
	if _, dup := mux.m[typ]; dup {
		panic(fmt.Sprintf("sluice: ServeMux: type %q registered twice", typ))
	}
	mux.m[typ] = h
}

// HandleFunc registers f for jobs of type typ.
func (mux *ServeMux) HandleFunc(typ string, f func(context.Context, *Job) error) {
	mux.Handle(typ, HandlerFunc(f))
}

// Use appends middleware, applied to every handler in the order given.
func (mux *ServeMux) Use(mw ...Middleware) {
	mux.mu.Lock()
	defer mux.mu.Unlock()
	mux.mw = append(mux.mw, mw...)
}

// ErrNoHandler is returned (wrapped, with SkipRetry semantics) for a job
// whose type has no handler. The mux's middleware sees it, as it sees
// every other job's result.
var ErrNoHandler = errors.New("sluice: no handler for job type")

// ProcessJob dispatches job to the handler of its type.
func (mux *ServeMux) ProcessJob(ctx context.Context, job *Job) error {
	mux.mu.RLock()
	h, ok := mux.m[job.Type]
	mw := mux.mw
	mux.mu.RUnlock()
	if !ok {
		// The middleware sees it too, as net/http's sees a 404.
		h = HandlerFunc(func(context.Context, *Job) error {
			return Permanent(fmt.Errorf("%w %q", ErrNoHandler, job.Type))
		})
	}
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h.ProcessJob(ctx, job)
}

// RescheduleError asks the queue to run the job again after After, without
// spending a retry. Return it with Reschedule, or with Refused when the
// job's downstream refused the call for its rate.
type RescheduleError struct {
	After  time.Duration
	Reason string
	// Refused marks a refusal by the job's downstream (Refused): the job
	// counts it, and is archived at the downstream's MaxRefusals.
	Refused bool
}

func (e *RescheduleError) Error() string {
	return fmt.Sprintf("sluice: rescheduled in %v: %s", e.After, e.Reason)
}

// Reschedule returns an error that puts the job back in the waiting room,
// ahead of its tenant's other jobs, for at least d; its tenant is skipped
// until then. No retry is spent.
func Reschedule(d time.Duration, reason string) error {
	return &RescheduleError{After: d, Reason: reason}
}

// Refused returns an error that reschedules the job as Reschedule does,
// spending no retry, and counts one refusal of the job by its downstream
// (a 429, or a 503: the built-in HTTP job returns it for those). A job
// refused its downstream's MaxRefusals times (DefaultMaxRefusals unless
// the policy says) is archived instead, with an error wrapping
// ErrRefusedTooOften, so that a call that is always refused ends.
func Refused(d time.Duration, reason string) error {
	return &RescheduleError{After: d, Reason: reason, Refused: true}
}

// permanentError is err, marked with asynq.SkipRetry: asynq archives the
// job without retrying it.
type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, asynq.SkipRetry} }

// Permanent wraps err so that the job is archived now, not retried.
func Permanent(err error) error { return &permanentError{err} }
