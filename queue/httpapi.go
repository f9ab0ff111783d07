package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algorithms"
)

// EnqueueRequest is the JSON body of the HTTP enqueue endpoint.
type EnqueueRequest struct {
	ID         string          `json:"id,omitempty"`
	Tenant     string          `json:"tenant"`
	Type       string          `json:"type"`
	Payload    json.RawMessage `json:"payload,omitempty"` // any JSON value, stored as its text
	Downstream string          `json:"downstream,omitempty"`
	Cost       int64           `json:"cost,omitempty"`
	Units      int64           `json:"units,omitempty"` // Job.Units
	MaxRetry   int             `json:"max_retry,omitempty"`
	Timeout    string          `json:"timeout,omitempty"` // a Go duration, e.g. "30s"
	// RunAt is when the job becomes due, RFC 3339 ("2026-11-27T09:00:00Z");
	// RunIn the same relative to the request, a Go duration ("10m"). At
	// most one of the two; neither: due at once (Job.RunAt).
	RunAt string `json:"run_at,omitempty"`
	RunIn string `json:"run_in,omitempty"`
}

// EnqueueResponse is the JSON body of every answer of the endpoint.
type EnqueueResponse struct {
	ID     string `json:"id,omitempty"`
	Depth  int64  `json:"depth,omitempty"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"` // invalid, duplicate, rate_limited, queue_full, tenant_full, redis_full, redis_evicts, busy, unavailable, not_replicated (Config.Replicas); with keys (HTTPKeyHandler) missing_key, bad_key, forbidden_tenant, too_many_failures
	// RetryAfter is how long to wait before trying again, in seconds to
	// the millisecond (rounded up); Retry-After gives it in whole seconds.
	RetryAfter float64 `json:"retry_after,omitempty"`
}

// HTTPHandler returns the HTTP enqueue endpoint for p, so that services in
// any language can produce. It takes POST with an EnqueueRequest as
// application/json and answers with an EnqueueResponse: 202 with the
// job's id; 400 for a bad request; 415 for another Content-Type (which a
// web page could send unasked); 409 "duplicate" (see Job.ID); 429 with
// Retry-After when admission refuses; 503 with Retry-After when the queue
// or the tenant's backlog is full, or Redis cannot be reached; 507
// "redis_full" with Retry-After when Redis is out of memory
// (ErrRedisFull); 503 "redis_evicts" when Redis may evict keys
// (ErrRedisEvicts), which retrying does not mend. Answers
// carry the RateLimit fields (IETF draft and X-RateLimit-*) when the
// tenant has a policy. Bind it to loopback unless the network in front of
// it is trusted, and refuse foreign Hosts and Origins, as cmd/worker does.
//
// The bodies it holds at once, over all requests, are bounded by
// bodyBudget(MaxPayload) bytes: a request whose body would take them over
// is answered 503 "busy" with Retry-After at once, and the rest of its
// body is not read. A body is reserved as it is read, so a client that
// sends slowly holds only what it has sent.
func HTTPHandler(p *Producer) http.Handler {
	return httpHandler(p, newByteBudget(bodyBudget(p.cfg.MaxPayload)))
}

// maxBody is the largest body of the HTTP enqueue endpoint for a queue
// whose MaxPayload is maxPayload: the payload, the longest tenant id and
// 64 KiB for the rest of the job.
func maxBody(maxPayload int) int64 { return int64(maxPayload) + MaxTenantLen + 64<<10 }

// bodyBudget is how many bytes of request bodies the HTTP enqueue
// endpoint of a queue whose MaxPayload is maxPayload holds at once: eight
// of the largest bodies (maxBody), and at least 8 MiB. Parsing a body
// takes a few times its size in memory while its request lasts.
func bodyBudget(maxPayload int) int64 { return max(8*maxBody(maxPayload), 8<<20) }

// httpHandler is HTTPHandler with the body budget b.
func httpHandler(p *Producer, b *byteBudget) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			reply(w, http.StatusMethodNotAllowed, EnqueueResponse{Error: "use POST", Reason: "invalid"})
			return
		}
		// A web page can POST text/plain or a form to any address
		// without asking (a "simple" request); it cannot send JSON so.
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			reply(w, http.StatusUnsupportedMediaType, EnqueueResponse{Error: "Content-Type must be application/json", Reason: "invalid"})
			return
		}
		body, reserved, err := readBody(r, maxBody(p.cfg.MaxPayload), b)
		defer b.release(reserved)
		if errors.Is(err, errBusy) {
			w.Header().Set("Retry-After", "1")
			reply(w, http.StatusServiceUnavailable, EnqueueResponse{Error: err.Error(), Reason: "busy", RetryAfter: 1})
			return
		}
		var job Job
		if err == nil {
			job, err = ParseJob(body)
		}
		if err != nil {
			reply(w, http.StatusBadRequest, EnqueueResponse{Error: "body: " + err.Error(), Reason: "invalid"})
			return
		}
		if !keyTenant(w, r, &job) { // HTTPKeyHandler's check
			return
		}
		rc, err := p.Enqueue(r.Context(), job)
		var rl *RateLimitedError
		var qf *QueueFullError
		var dup *DuplicateJobError
		switch {
		case err == nil:
			if rc.Policy != nil {
				rateLimitHeaders(w.Header(), *rc.Policy, rc.Decision)
			}
			reply(w, http.StatusAccepted, EnqueueResponse{ID: rc.ID, Depth: rc.Depth})
		case errors.As(err, &rl):
			rateLimitHeaders(w.Header(), rl.Policy, rl.Decision)
			w.Header().Set("Retry-After", seconds(rl.Decision.RetryAfter))
			reply(w, http.StatusTooManyRequests, EnqueueResponse{Error: err.Error(), Reason: "rate_limited", RetryAfter: milliseconds(rl.Decision.RetryAfter)})
		case errors.As(err, &qf):
			reason := "queue_full"
			if qf.Tenant != "" {
				reason = "tenant_full"
			}
			w.Header().Set("Retry-After", "1")
			reply(w, http.StatusServiceUnavailable, EnqueueResponse{Error: err.Error(), Reason: reason, Depth: qf.Depth, RetryAfter: 1})
		case errors.As(err, &dup):
			reply(w, http.StatusConflict, EnqueueResponse{ID: dup.ID, Error: err.Error(), Reason: "duplicate"})
		case errors.Is(err, ErrInvalidJob):
			reply(w, http.StatusBadRequest, EnqueueResponse{Error: err.Error(), Reason: "invalid"})
		case errors.Is(err, ErrRedisFull):
			// 507: the server cannot store the job; transient, as the
			// workers drain.
			// The body leaves Redis's address out, as "unavailable" does.
			w.Header().Set("Retry-After", "5")
			reply(w, http.StatusInsufficientStorage, EnqueueResponse{Error: "Redis is out of memory: the queue takes no job until the workers have drained some; retry later", Reason: "redis_full", RetryAfter: 5})
		case errors.Is(err, ErrRedisEvicts):
			reply(w, http.StatusServiceUnavailable, EnqueueResponse{Error: "Redis may evict keys (its maxmemory-policy is not noeviction): the queue takes no job until it is set to noeviction", Reason: "redis_evicts"})
		case errors.Is(err, ErrNotReplicated): // stored on the primary only (Config.Replicas)
			reply(w, http.StatusServiceUnavailable, notReplicated(err))
		default:
			w.Header().Set("Retry-After", "1")
			reply(w, http.StatusServiceUnavailable, EnqueueResponse{Error: "the queue is unavailable; retry", Reason: "unavailable", RetryAfter: 1})
		}
	})
}

// errBusy is readBody's error when the body budget has no room.
var errBusy = errors.New("the endpoint holds as many request bytes as it may take at once; retry")

// readBody reads r's body, of at most limit bytes, reserving in b the
// room of its buffer as the buffer grows: it returns the body, the bytes
// reserved (to release once the body is no longer needed, whatever the
// error), and errBusy when b has no room for the next part, without
// reading further. A Content-Length above limit is refused unread.
func readBody(r *http.Request, limit int64, b *byteBudget) (body []byte, reserved int64, err error) {
	tooLarge := fmt.Errorf("larger than %d bytes", limit)
	if r.ContentLength > limit {
		return nil, 0, tooLarge
	}
	want := limit + 1 // one byte more than the limit tells a body over it
	if r.ContentLength >= 0 {
		want = r.ContentLength + 1 // and the extra byte reads the end
	}
	buf := []byte(nil)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				return nil, reserved, tooLarge
			}
			grow := min(max(2*int64(cap(buf)), 32<<10), want) - int64(cap(buf))
			if !b.take(grow) {
				return nil, reserved, errBusy
			}
			reserved += grow
			buf = append(make([]byte, 0, int64(cap(buf))+grow), buf...)
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case errors.Is(err, io.EOF):
			if int64(len(buf)) > limit {
				return nil, reserved, tooLarge
			}
			return buf, reserved, nil
		case err != nil:
			return nil, reserved, err
		}
	}
}

// byteBudget is a count of bytes that requests take and give back, which
// never goes above its size. Safe for concurrent use.
type byteBudget struct {
	size int64
	used atomic.Int64
}

func newByteBudget(size int64) *byteBudget { return &byteBudget{size: size} }

// take reserves n bytes, or reports false and reserves nothing when that
// would go above the size.
func (b *byteBudget) take(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.size {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// release gives back n bytes.
func (b *byteBudget) release(n int64) { b.used.Add(-n) }

func reply(w http.ResponseWriter, code int, body EnqueueResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(body)
}

// seconds formats d as whole seconds, rounded up: a client that waits
// that long is never early.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}

// milliseconds gives d in seconds, rounded up to the millisecond: 2.971
// for 2.970137s, which JSON writes as such rather than as the float
// nearest d.Seconds() (2.9701370000000002).
func milliseconds(d time.Duration) float64 {
	return float64((d+time.Millisecond-1)/time.Millisecond) / 1000
}

// rateLimitHeaders sets the IETF RateLimit-Policy and RateLimit fields and
// the common X-RateLimit-* ones from a decision.
func rateLimitHeaders(h http.Header, p algorithms.Policy, d algorithms.Decision) {
	window := seconds(p.Period)
	reset := seconds(d.ResetAfter)
	h.Set("RateLimit-Policy", fmt.Sprintf(`"tenant";q=%d;w=%s`, p.Limit, window))
	h.Set("RateLimit", fmt.Sprintf(`"tenant";r=%d;t=%s`, d.Remaining, reset))
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(d.Remaining, 10))
	h.Set("X-RateLimit-Reset", reset)
}
