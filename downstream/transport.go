package downstream

import (
	"cmp"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/promreg"
	"github.com/sluicehq/sluice/throttle"
)

// Defaults of Transport.
const (
	// DefaultBackoff is the pause after a 429 or 503 that says nothing of
	// when to come back.
	DefaultBackoff = time.Second
	// DefaultMaxPause caps any pause a downstream asks for.
	DefaultMaxPause = 10 * time.Minute
	// ConcurrencyBackoff is the pause after a concurrency refusal that
	// says nothing of when to come back: long enough for a call in flight
	// to end, short enough to cost the rate nothing.
	ConcurrencyBackoff = 100 * time.Millisecond
)

// MaxResponseHeaderBytes is how much of a response's header the
// transport NewBase returns reads, 64 KiB: an API's answer needs a few
// KiB, and Go's own limit, 10 MB a response, would let a downstream (or
// whoever answers for it) fill a worker's memory with header fields. A
// response with more fails as a network error does.
const MaxResponseHeaderBytes = 64 << 10

// NewBase returns a new http.Transport with the settings of
// http.DefaultTransport, but for a response header limited to
// MaxResponseHeaderBytes. Transport and the queue's HTTP job send through
// one of these unless given a Base; a program that sets its own Base
// should set the same limit.
func NewBase() *http.Transport {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok { // a program replaced it
		t = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	t = t.Clone()
	t.MaxResponseHeaderBytes = MaxResponseHeaderBytes
	return t
}

// defaultBase is the Base of a Transport that names none: one for the
// process, so that its connections are kept and shared.
var defaultBase = sync.OnceValue(func() http.RoundTripper { return NewBase() })

// Transport is an http.RoundTripper that gives any client (an SDK's, or
// a program's own http.Client) the whole throttle. Before each request it
// books the request's cost (Cost, default 1) on the key's buckets,
// fleet-wide, and waits for the slot; after each response it reads what
// the response says (ParseFeedback) and acts on it:
//
//   - the key's buckets follow the API's own count: a bucket that holds
//     more than the API reports left, less Headroom, is drained to it
//     (throttle.Throttle.Observe);
//   - a refusal for the rate pauses the key fleet-wide as long as
//     pauseFor says (Retry-After; for a reset that means "full again",
//     the time until the next unit, not until full) and steps the fleet's
//     pace down; a concurrency refusal pauses it only ConcurrencyBackoff
//     and lowers this Transport's calls in flight on the key; an overload
//     (503, 529) pauses it without a step down; neither of those two
//     charges the quota: the request's booking is given back;
//   - Settle, when set, corrects the booking to the call's real cost.
//
// Every request takes its own slot, so no retry of an SDK's can skip the
// bucket or a pause; a caller that booked a slot already (the queue's
// worker, for its job) hands it over with WithReservation, for the first
// request only. sluice's own refusals (a slot further away than the
// Limit's MaxWait, all concurrency leases held, Redis unreachable with no
// fallback) come back as a synthesized 429 response that SDKs do not
// retry (see OwnRefusal), not as errors their retry loops would repeat.
// Only a ctx that ends, a Limit that is invalid, or a request the Base
// cannot send returns an error.
type Transport struct {
	// Base performs the requests; default a transport of NewBase's, shared
	// by the process.
	Base http.RoundTripper
	// Throttle paces the requests. Required.
	Throttle *throttle.Throttle
	// Limit is the downstream's pace; its Name labels metrics. One
	// reservation books every bucket of it at once: a Limit of tokens a
	// minute with Also of requests a minute (Counts: throttle.CountsCalls)
	// books a request's tokens and the request itself together.
	Limit throttle.Limit
	// Concurrency, when set, caps the requests in flight fleet-wide. A
	// request takes its lease once its pace slot is due (never while it
	// sleeps for the slot or a pause), and holds it, extended in the
	// background, until the response body is closed (close it); a lease
	// that cannot be extended ends the request (throttle.Lease.Keep).
	// When every lease is held, the request waits up to
	// Limit.WaitLimit() (MaxWait, 10s when unset, none with NoWait) for
	// one, woken as soon as one is given back
	// (throttle.Throttle.WaitAcquire).
	Concurrency *throttle.Concurrency
	// Key returns the throttle key of a request; default the request's
	// host. Per-account quotas key by account.
	Key func(*http.Request) string
	// Cost returns a request's estimated cost in the Limit's units (an
	// LLM call's prompt tokens plus its max output tokens); default 1, and
	// anything below 1 reads as 1. It may read the request's body only
	// through GetBody, leaving Body unread.
	Cost func(*http.Request) int64
	// Settle, when set, returns a call's real cost from its response
	// (usage in the body or a header), or false to leave the estimate
	// booked. It is called once, when the response body is read to its
	// end or closed, with the first MaxSettleBody bytes of what the
	// caller read of the body; the caller reads the body as if Settle
	// were not there. A refused call (a 429, 503 or 529) is not settled.
	Settle func(resp *http.Response, body []byte) (int64, bool)
	// Follow names, for the Limit's own bucket and then each of
	// Limit.Also's, the unit of the API's quota it follows (UnitRequests,
	// UnitTokens, UnitInputTokens, UnitOutputTokens; "none" to follow
	// nothing). By default a bucket that counts calls, and the Limit's own
	// bucket when Cost is nil, follows UnitRequests (or a family's quota of
	// unnamed units); the Limit's own bucket with a Cost follows
	// UnitTokens.
	Follow []string
	// Headroom, from 0 to 1, is the share of each quota the API states
	// (its limit, or the bucket's burst when it states none) that the
	// buckets leave to the quota's other clients (the app's own
	// interactive calls on the same key): a bucket holds no more than the
	// API's remaining count less Headroom × limit. The policy file's
	// downstream setting headroom: 25% sets 0.25. Default 0.
	Headroom float64
	// Metrics counts responses by code; nil for none.
	Metrics *Metrics
}

// MaxSettleBody is the most of a response body that Transport keeps for
// its Settle: an LLM API's usage comes after its answer.
const MaxSettleBody = 256 << 10

type handedKey struct{}

// handed is a reservation handed to a Transport's first request.
type handed struct {
	r    throttle.Reservation
	used atomic.Bool
}

// WithReservation returns ctx carrying r, a slot its caller booked and
// waited for already (the queue's worker books the job's before its
// handler runs), so that the first request a Transport sends with ctx
// uses r instead of booking another: one call, one slot. Every later
// request with ctx (an SDK's retry, a redirect) books its own.
func WithReservation(ctx context.Context, r throttle.Reservation) context.Context {
	return context.WithValue(ctx, handedKey{}, &handed{r: r})
}

// takeHanded returns the reservation ctx hands over, once.
func takeHanded(ctx context.Context) (throttle.Reservation, bool) {
	h, _ := ctx.Value(handedKey{}).(*handed)
	if h == nil || !h.used.CompareAndSwap(false, true) {
		return throttle.Reservation{}, false
	}
	return h.r, true
}

type ownPauseKey struct{}

// WithOwnPause marks ctx as carrying a request whose refusal (a 429 or
// 503) should not pause the fleet: the queue's worker sets it on a job
// that its downstream has refused before, so that one call that is
// always refused (a bad path, a disabled account) costs the fleet its
// first Retry-After, not one for every try, while calls of others
// succeed. Only the caller waits.
func WithOwnPause(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownPauseKey{}, true)
}

// RoundTrip books a slot, sends req, and feeds the response back into
// the throttle.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Throttle == nil {
		return nil, errors.New("sluice: downstream.Transport: nil Throttle")
	}
	ctx, key, base := req.Context(), req.URL.Host, cmp.Or(t.Base, defaultBase())
	if t.Key != nil {
		key = t.Key(req)
	}
	r, own := takeHanded(ctx)
	var lease *throttle.Lease
	if !own {
		cost := int64(1)
		if t.Cost != nil {
			cost = max(t.Cost(req), 1)
		}
		var err error
		if t.Concurrency != nil {
			// Slot first, then the lease: none is held while the request
			// sleeps for its slot or a pause.
			r, lease, err = t.Throttle.WaitAcquire(ctx, key, t.Limit, cost, *t.Concurrency)
		} else {
			r, err = t.Throttle.Wait(ctx, key, t.Limit, cost)
		}
		if err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return refusal(req, err)
		}
	}
	fl := t.flight(key)
	if err := fl.enter(ctx); err != nil {
		release(lease)
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if lease != nil {
		// Kept while the request and its body are read: if the lease
		// cannot be extended, the request ends with it.
		req = req.WithContext(lease.Keep(ctx))
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		fl.leave(NotRefused)
		release(lease)
		t.Metrics.observe(t.Limit.Name, "error")
		return nil, err
	}
	t.Metrics.observe(t.Limit.Name, codeLabel(resp.StatusCode))
	f := ParseFeedback(resp.StatusCode, resp.Header, time.Now())
	fl.leave(f.Refused)
	t.feedback(context.WithoutCancel(ctx), key, r, f)
	if t.Settle != nil && f.Refused == NotRefused {
		resp.Body = &settlingBody{ReadCloser: resp.Body, done: func(body []byte) {
			if actual, ok := t.Settle(resp, body); ok && actual >= 0 {
				// Should Redis fail now, the estimate stands.
				_ = t.Throttle.Settle(context.WithoutCancel(ctx), r, actual)
			}
		}}
	}
	if lease != nil {
		resp.Body = &releasingBody{ReadCloser: resp.Body, lease: lease}
	}
	return resp, nil
}

// feedback acts on what a response said (Transport has the rule). Errors
// of Redis leave the key as it is: the next response tells again.
func (t *Transport) feedback(ctx context.Context, key string, r throttle.Reservation, f Feedback) {
	if levels := t.levels(f); len(levels) > 0 {
		_, _ = t.Throttle.Observe(ctx, key, t.Limit, levels...)
	}
	if f.Refused == ConcurrencyRefused || f.Refused == Overloaded {
		// The API did not serve the call: it cost no quota.
		_ = t.Throttle.Settle(ctx, r, 0)
	}
	d, step := pauseFor(f)
	if d <= 0 || ctx.Value(ownPauseKey{}) != nil {
		return
	}
	if step {
		_, _ = t.Throttle.Backoff(ctx, key, t.Limit, d)
	} else {
		_, _ = t.Throttle.Pause(ctx, key, t.Limit, d)
	}
}

// levels are the buckets' levels f reports, less the headroom: each
// bucket's, by the unit it follows (Transport.Follow).
func (t *Transport) levels(f Feedback) []throttle.Level {
	if f.nq == 0 {
		return nil
	}
	var out []throttle.Level
	for i := 0; i <= len(t.Limit.Also); i++ {
		unit := t.follows(i)
		q, ok := f.Quota(unit)
		if !ok && unit == UnitRequests {
			q, ok = f.Quota("")
		}
		if !ok || q.Remaining < 0 {
			continue
		}
		left := q.Remaining
		if h := min(max(t.Headroom, 0), 1); h > 0 {
			size := q.Limit
			if size <= 0 {
				size = t.burst(i)
			}
			left -= int64(math.Ceil(h * float64(size)))
		}
		out = append(out, throttle.Level{Bucket: i, Left: max(left, 0)})
	}
	return out
}

// follows is the unit bucket i follows (Transport.Follow).
func (t *Transport) follows(i int) string {
	if i < len(t.Follow) && t.Follow[i] != "" {
		return t.Follow[i]
	}
	if i > 0 && t.Limit.Also[i-1].Counts == throttle.CountsCalls || i == 0 && t.Cost == nil {
		return UnitRequests
	}
	return UnitTokens
}

// burst is bucket i's burst, 1 when unset.
func (t *Transport) burst(i int) int64 {
	if i == 0 {
		return max(t.Limit.Burst, 1)
	}
	return max(t.Limit.Also[i-1].Burst, 1)
}

func release(l *throttle.Lease) {
	if l != nil {
		l.Release(context.Background())
	}
}

// releasingBody gives the concurrency slot back when the body is closed.
type releasingBody struct {
	io.ReadCloser
	lease *throttle.Lease
	once  sync.Once
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { release(b.lease) })
	return err
}

// settlingBody keeps the first MaxSettleBody bytes the caller reads and
// calls done with them once: at the body's end, or when it is closed.
type settlingBody struct {
	io.ReadCloser
	kept []byte
	once sync.Once
	done func([]byte)
}

func (b *settlingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if room := MaxSettleBody - len(b.kept); room > 0 {
		b.kept = append(b.kept, p[:min(n, room)]...)
	}
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

func (b *settlingBody) Close() error {
	err := b.ReadCloser.Close()
	b.finish()
	return err
}

func (b *settlingBody) finish() { b.once.Do(func() { b.done(b.kept) }) }

// Metrics counts downstream responses.
type Metrics struct {
	responses *prometheus.CounterVec
}

// NewMetrics creates and registers (when reg is not nil)
// sluice_downstream_responses_total{downstream,code}; code is the HTTP
// status for those people alert on (see codeLabel), its class ("2xx",
// "3xx", "4xx", "5xx") for the others, "other" for a status outside
// 200-599, or "error" for a request that got no response. A downstream
// can therefore add at most 21 series, whatever it answers. It returns an
// error when reg already holds a metric of that name.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{responses: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_downstream_responses_total",
		Help: "Responses from downstream APIs by status code (\"error\": no response).",
	}, []string{"downstream", "code"})}
	if err := promreg.Register(reg, m.responses); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) observe(name, code string) {
	if m != nil {
		m.responses.WithLabelValues(cmp.Or(name, "default"), code).Inc()
	}
}

// codeLabel is the code label of a response's status, as NewMetrics says:
// the statuses people alert on keep their own.
func codeLabel(status int) string {
	switch status {
	case 200, 201, 202, 204, 400, 401, 403, 404, 409, 422, 429, 500, 502, 503, 504:
		return strconv.Itoa(status)
	}
	if status < 200 || status >= 600 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// PauseOf is how long the Transport pauses the fleet after resp, from what
// ParseFeedback reads in it (pauseFor has the rule). At most
// DefaultMaxPause.
func PauseOf(resp *http.Response) time.Duration {
	d, _ := pauseFor(ParseFeedback(resp.StatusCode, resp.Header, time.Now()))
	return d
}

// pauseAt is PauseOf of a response of status and h at time now.
func pauseAt(status int, h http.Header, now time.Time) time.Duration {
	d, _ := pauseFor(ParseFeedback(status, h, now))
	return d
}

// pauseFor is the pause after a response of feedback f, at most
// DefaultMaxPause, and whether it steps the fleet's pace down (only a
// rate refusal does):
//
//   - a rate refusal: RetryAfter when above 0 (0 would retry in a hot
//     loop), else the time until the quotas at 0 free a unit (f.Next: a
//     reset that means "full again" reads as Reset/Limit, not as Reset),
//     else the vendor's guidance: GitHub's minute for a secondary limit
//     that says nothing, DefaultBackoff (no longer than the reset of a
//     quota at 0 that refills steadily) for the others;
//   - a concurrency refusal: RetryAfter, else f.Next or
//     ConcurrencyBackoff, the longer;
//   - an overload (503, 529): RetryAfter, else f.Next or DefaultBackoff,
//     the longer;
//   - any other response: f.Next, the time until a quota the response
//     leaves at 0 frees a unit.
func pauseFor(f Feedback) (time.Duration, bool) {
	var d time.Duration
	switch f.Refused {
	case RateRefused:
		d = cmp.Or(f.RetryAfter, f.Next(), guidance(f))
	case ConcurrencyRefused:
		d = cmp.Or(f.RetryAfter, max(f.Next(), ConcurrencyBackoff))
	case Overloaded:
		d = cmp.Or(f.RetryAfter, max(f.Next(), DefaultBackoff))
	default:
		d = f.Next()
	}
	return min(d, DefaultMaxPause), f.Refused == RateRefused
}

// guidance is the wait after a rate refusal that states no wait of its
// own (pauseFor).
func guidance(f Feedback) time.Duration {
	if f.Resource != "" && !f.HasRetryAfter && f.Remaining != 0 {
		// GitHub's secondary limits: "wait for at least one minute".
		return time.Minute
	}
	var full time.Duration
	for _, q := range f.Quotas() {
		if q.Remaining == 0 && q.Full {
			full = max(full, q.Reset)
		}
	}
	if full > 0 {
		return min(full, DefaultBackoff)
	}
	return DefaultBackoff
}
