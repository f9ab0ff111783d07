// Package httpjob is the queue's built-in job type for outbound HTTP calls,
// sluice.http, which makes the worker useful with no Go code of the
// user's. Each job sends one request through a downstream.Transport and
// maps the answer onto the queue's outcomes.
//
// It lives apart from package downstream so that programs using only the
// throttled http.RoundTripper do not link the queue (and asynq).
package httpjob

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/internal/keyspace"
	"github.com/sluicehq/sluice/internal/urlerr"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/throttle"
)

// Type is the job type of the built-in outbound HTTP call.
const Type = "sluice.http"

// IdempotencyHeader is the header field in which a Type request
// carries its job's id scoped by its tenant (queue.Job.ScopedID), so that
// a downstream can recognise a repeat, and never takes one tenant's
// request for a repeat of another's of the same id. A key the payload
// gives is scoped the same way: the tenant, encoded as in ScopedID, then
// "/" and the key. The encoded tenant holds no "/", so no tenant can send
// a key that another tenant's job sends.
const IdempotencyHeader = "Idempotency-Key"

// Request is the payload of a Type job.
type Request struct {
	// Method is the HTTP method, one of downstream.HTTPMethods; default GET.
	Method string `json:"method,omitempty"`
	// URL must lie under the base URL of the job's downstream.
	URL string `json:"url"`
	// Header fields to send: names that are tokens, values without
	// control characters but tab (CheckRequest). Idempotency-Key
	// (IdempotencyHeader) is the job's scoped id unless this sets it: ""
	// sends none, and any other value is sent inside the job's tenant's
	// scope, as ScopedID writes an id: "order-42" from tenant alice goes
	// out as "=alice/order-42", "=alice/order-42" from tenant mallory as
	// "=mallory/=alice/order-42".
	Header map[string]string `json:"header,omitempty"`
	// Body to send.
	Body string `json:"body,omitempty"`
}

// Handler runs Type jobs: it sends the request through a
// downstream.Transport, handing it the slot the worker booked for the job
// (downstream.WithReservation), so that the call is booked once and the
// Transport reads the response's limits, and maps the answer onto the
// queue:
//
//   - 2xx: done;
//   - a 429 for calls in flight (Stripe's *-concurrency): the job is
//     rescheduled after downstream.ConcurrencyBackoff, spending no retry
//     and not counted as a refusal;
//   - 429, 503 or 529: the downstream is paused fleet-wide (by
//     Retry-After, or the vendor's fields, or downstream.DefaultBackoff;
//     downstream.Transport has the rule) and the job
//     rescheduled for then, spending no retry (queue.Refused); a job
//     refused its downstream's MaxRefusals times is archived, with the
//     last status in the error;
//   - other 5xx and network errors: retried with backoff;
//   - other 4xx: archived, with the status and the start of the body in
//     the error.
//
// When the downstream names where its responses report a call's real cost
// (queue.Downstream.CostFrom: policy's cost_from), the slot the worker
// booked at the job's Units is settled to it (queue.Settle), whatever the
// status; a response that does not report it leaves the estimate booked.
//
// Delivery is at least once, so each request carries IdempotencyHeader
// (the header of Stripe and of the IETF httpapi draft).
//
// A job may only call a URL under its downstream's base URL (Resolve
// refuses others), so that whoever can enqueue cannot make the workers
// reach arbitrary hosts.
type Handler struct {
	// Resolve returns the job's downstream for its URL, or an error when
	// the URL is not under the downstream's base URL: for a base URL
	// with {tenant}, under the job's own tenant's host or path
	// (policy.Config.ResolveHTTP). Required.
	Resolve func(job *queue.Job, rawURL string) (queue.Downstream, error)
	// Throttle receives pauses. Required.
	Throttle *throttle.Throttle
	// Base sends the requests; default downstream.Transport's (NewBase:
	// a response header of at most downstream.MaxResponseHeaderBytes).
	Base http.RoundTripper
	// Metrics counts responses; nil for none.
	Metrics *downstream.Metrics
}

// ParseRequest reads a Type job's payload and refuses what could never be
// sent: a payload that is no Request, no url, a method outside
// downstream.HTTPMethods, an unsendable header (downstream.CheckRequest).
// The worker archives such a job; the policy's CheckJob refuses it at
// enqueue with the same words.
func ParseRequest(payload []byte) (Request, error) {
	var req Request
	if err := json.Unmarshal(payload, &req); err != nil {
		return Request{}, fmt.Errorf("payload is not an HTTP request: %v", err)
	}
	if req.URL == "" {
		return Request{}, errors.New("url is required")
	}
	if err := downstream.CheckRequest(req.Method, req.Header); err != nil {
		return Request{}, err
	}
	return req, nil
}

// ProcessJob sends the job's request.
func (h *Handler) ProcessJob(ctx context.Context, job *queue.Job) error {
	req, err := ParseRequest(job.Payload)
	if err != nil {
		// It can never be sent: archive it, spending no retry.
		return queue.Permanent(fmt.Errorf("sluice: %s job %s: %w", Type, job.ID, err))
	}
	target, err := h.Resolve(job, req.URL)
	if err != nil {
		// Wrapped, so that the reason shows to errors.Is (a policy's
		// ErrURLNotAllowed, ErrTenantURL).
		return queue.Permanent(fmt.Errorf("sluice: %s job %s: %w", Type, job.ID, err))
	}
	if r, ok := queue.Reservation(ctx); ok {
		// The worker booked the job's slot: the call's first request uses
		// it, so the call is booked once; a redirect books its own.
		ctx = downstream.WithReservation(ctx, r)
	}
	if job.Refusals() > 0 {
		// Refused before: a refusal now pauses only this job, not the
		// fleet (downstream.WithOwnPause).
		ctx = downstream.WithOwnPause(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(target.Timeout, 30*time.Second))
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, req.Method, req.URL, strings.NewReader(req.Body))
	if err != nil {
		// Say why without the URL: it may hold credentials.
		return queue.Permanent(fmt.Errorf("sluice: %s job %s: %s", Type, job.ID, urlerr.Reason(err)))
	}
	idem := job.ScopedID()
	for k, v := range req.Header {
		if http.CanonicalHeaderKey(k) == IdempotencyHeader {
			idem = scoped(job, v)
			continue
		}
		hr.Header.Set(k, v)
	}
	if idem != "" {
		hr.Header.Set(IdempotencyHeader, idem)
	}
	for k, v := range target.Headers {
		hr.Header.Set(k, v)
	}
	// The trace context of the job's call span, when the worker traces.
	queue.InjectTrace(ctx, propagation.HeaderCarrier(hr.Header))
	key := queue.ThrottleKey(job, target.PerTenant)
	tr := &downstream.Transport{Base: h.Base, Throttle: h.Throttle, Limit: target.Limit, Key: func(*http.Request) string { return key }, Metrics: h.Metrics,
		Headroom: target.Headroom}
	resp, err := tr.RoundTrip(hr)
	if err != nil {
		// The URL may carry credentials: say only where it went.
		return fmt.Errorf("sluice: %s job %s to %s: %w", Type, job.ID, hr.URL.Host, redact(err, req.URL))
	}
	defer resp.Body.Close()
	if err := downstream.OwnRefusal(resp); err != nil {
		// sluice's refusal, not the downstream's: a slot too far or every
		// lease held puts the job back for that time, spending no retry.
		return err
	}
	head := 512 // for the error
	if len(target.CostFrom.JSON) > 0 {
		head = maxCostBody
	}
	var body []byte
	if len(target.CostFrom.JSON) > 0 || resp.StatusCode < 200 || resp.StatusCode >= 300 {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, int64(head)))
	} else {
		// A success's body is read for nothing but its cost: drained, as
		// far as ever, without a copy kept.
		io.Copy(io.Discard, io.LimitReader(resp.Body, int64(head)))
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if actual, ok := ReadCost(target.CostFrom, resp.Header, body); ok {
		// The worker booked the job's units before the handler ran: give
		// back what the call did not use, or book what it overran. Should
		// Redis fail now, the estimate stands.
		_ = queue.Settle(ctx, actual)
	}
	snippet := body[:min(len(body), 512)]
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return nil
	case downstream.ParseFeedback(code, resp.Header, time.Now()).Refused == downstream.ConcurrencyRefused:
		// Too many calls in flight, not too fast: again after the short
		// back-off, not counted against max_refusals.
		return queue.Reschedule(downstream.PauseOf(resp), fmt.Sprintf("HTTP %d from %s: too many calls in flight", code, hr.URL.Host))
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable || code == 529:
		// Again when the pause the Transport set for the fleet ends (PauseOf
		// is never 0 for a 429 or 503).
		// A refusal: the job is archived at the downstream's max_refusals.
		return queue.Refused(downstream.PauseOf(resp), fmt.Sprintf("HTTP %d from %s", code, hr.URL.Host))
	case code >= 500:
		// The downstream failed: counted toward its circuit.
		return queue.Failed(fmt.Errorf("sluice: %s job %s: HTTP %d from %s", Type, job.ID, code, hr.URL.Host))
	default:
		return queue.Permanent(fmt.Errorf("sluice: %s job %s: HTTP %d from %s: %s", Type, job.ID, code, hr.URL.Host, bytes.TrimSpace(snippet)))
	}
}

// ReadCost returns the call's real cost where c says the response
// reports it: a header field, or a path into body, a JSON document (or
// its start); false when c is zero or the response does not hold a whole
// number of at least 0 there (then the estimate stands).
func ReadCost(c queue.CostFrom, header http.Header, body []byte) (int64, bool) {
	switch {
	case c.Header != "":
		v := strings.TrimSpace(header.Get(c.Header))
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			return n, true
		}
	case len(c.JSON) > 0:
		return jsonCost(json.NewDecoder(bytes.NewReader(body)), c.JSON)
	}
	return 0, false
}

// maxCostBody is the most of a response body that a CostFrom of JSON
// reads to find the cost: an LLM API's usage comes after its answer.
const maxCostBody = 256 << 10

// jsonCost walks d, at the start of a value, down path and reads the
// number there. It decodes only what lies before the number, so that a
// body cut at maxCostBody after it still serves.
func jsonCost(d *json.Decoder, path []string) (int64, bool) {
	d.UseNumber()
	for _, key := range path {
		if t, err := d.Token(); err != nil || t != json.Delim('{') {
			return 0, false
		}
		for {
			t, err := d.Token()
			if err != nil || t == json.Delim('}') {
				return 0, false
			}
			if k, _ := t.(string); k == key {
				break
			}
			var skip json.RawMessage
			if d.Decode(&skip) != nil {
				return 0, false
			}
		}
	}
	t, err := d.Token()
	if err != nil {
		return 0, false
	}
	num, ok := t.(json.Number)
	if !ok {
		return 0, false
	}
	if n, err := num.Int64(); err == nil {
		if n < 0 {
			return 0, false
		}
		return n, true
	}
	f, err := num.Float64() // 1.2e3, 1200.0
	if err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return 0, false
	}
	return int64(f), true
}

// scoped returns key, given by job's payload, inside job's tenant's
// scope as ScopedID writes the job's id; "" stays "" (no key).
func scoped(job *queue.Job, key string) string {
	if key == "" {
		return ""
	}
	enc, err := keyspace.Encode(job.Tenant)
	if err != nil { // no tenant: never a job a Producer accepted
		return ""
	}
	return enc + "/" + key
}

// redact removes the full URL (which may hold credentials or tokens in
// its query) from err's text.
func redact(err error, rawURL string) error {
	msg := err.Error()
	if !strings.Contains(msg, rawURL) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(msg, rawURL, "<url>"), err: err}
}

type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// Redacted is what Redact shows in place of a secret header value.
const Redacted = "[redacted]"

// sensitiveHeaders are the header fields whose values Redact hides,
// canonical.
var sensitiveHeaders = []string{"Authorization", "Cookie", "Proxy-Authorization", "X-Api-Key"}

// Redact returns payload, a Type job's payload, with the values of its
// Authorization, Cookie, Proxy-Authorization and X-Api-Key header fields
// (in any case) replaced by Redacted, for showing or logging it. A payload
// without such a field, or that is no Request, comes back as it is.
func Redact(payload []byte) []byte {
	var req Request
	if json.Unmarshal(payload, &req) != nil {
		return payload
	}
	changed := false
	for k := range req.Header {
		if slices.Contains(sensitiveHeaders, http.CanonicalHeaderKey(k)) {
			req.Header[k] = Redacted
			changed = true
		}
	}
	if !changed {
		return payload
	}
	b, _ := json.Marshal(req) // strings and a map of strings always marshal
	return b
}
