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
	ID         string  `json:"id,omitempty"`
	Depth      int64   `json:"depth,omitempty"`
	Error      string  `json:"error,omitempty"`
	Reason     string  `json:"reason,omitempty"` // invalid, duplicate, rate_limited, queue_full, tenant_full, redis_full, redis_evicts, unavailable
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
func HTTPHandler(p *Producer) http.Handler {
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
		limit := int64(p.cfg.MaxPayload) + MaxTenantLen + 64<<10
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			err = fmt.Errorf("larger than %d bytes", limit)
		}
		var job Job
		if err == nil {
			job, err = ParseJob(body)
		}
		if err != nil {
			reply(w, http.StatusBadRequest, EnqueueResponse{Error: "body: " + err.Error(), Reason: "invalid"})
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
			reply(w, http.StatusTooManyRequests, EnqueueResponse{Error: err.Error(), Reason: "rate_limited", RetryAfter: rl.Decision.RetryAfter.Seconds()})
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
		default:
			w.Header().Set("Retry-After", "1")
			reply(w, http.StatusServiceUnavailable, EnqueueResponse{Error: "the queue is unavailable; retry", Reason: "unavailable", RetryAfter: 1})
		}
	})
}

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
