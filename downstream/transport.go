package downstream

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
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

// Transport is an http.RoundTripper that paces requests through a shared
// throttle: before each request it waits for the key's next slot
// (fleet-wide), and after each response it pauses the whole fleet on that
// key for as long as PauseOf says, stepping its pace down.
//
// A request whose slot is further away than the Limit's MaxWait fails with
// an error wrapping *throttle.TooFarError (errors.As finds it through
// *url.Error); a request made with Redis unreachable fails with
// throttle.ErrUnavailable unless the Throttle has a fallback.
type Transport struct {
	// Base performs the requests; default a transport of NewBase's, shared
	// by the process.
	Base http.RoundTripper
	// Throttle paces the requests. Required.
	Throttle *throttle.Throttle
	// Limit is the downstream's pace; its Name labels metrics.
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
	// Metrics counts responses by code; nil for none.
	Metrics *Metrics
}

type slotTakenKey struct{}

// WithSlotTaken marks ctx as carrying a request whose throttle slot was
// taken already (the queue's worker takes it before a job runs), so that
// Transport does not take a second one; it still reads the response's
// limits and pauses the key.
func WithSlotTaken(ctx context.Context) context.Context {
	return context.WithValue(ctx, slotTakenKey{}, true)
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

// RoundTrip takes a slot, sends req, and feeds the response's limits back
// into the throttle.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Throttle == nil {
		return nil, errors.New("sluice: downstream.Transport: nil Throttle")
	}
	ctx, key, base := req.Context(), req.URL.Host, cmp.Or(t.Base, defaultBase())
	if t.Key != nil {
		key = t.Key(req)
	}
	var lease *throttle.Lease
	if taken, _ := ctx.Value(slotTakenKey{}).(bool); !taken {
		var err error
		if t.Concurrency != nil {
			// Slot first, then the lease: none is held while the request
			// sleeps for its slot or a pause.
			_, lease, err = t.Throttle.WaitAcquire(ctx, key, t.Limit, 1, *t.Concurrency)
		} else {
			_, err = t.Throttle.Wait(ctx, key, t.Limit, 1)
		}
		if err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
	}
	if lease != nil {
		// Kept while the request and its body are read: if the lease
		// cannot be extended, the request ends with it.
		req = req.WithContext(lease.Keep(ctx))
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		release(lease)
		t.Metrics.observe(t.Limit.Name, "error")
		return nil, err
	}
	t.Metrics.observe(t.Limit.Name, codeLabel(resp.StatusCode))
	if d := PauseOf(resp); d > 0 && ctx.Value(ownPauseKey{}) == nil {
		// An error leaves the key unpaused: the next request finds out again.
		_, _ = t.Throttle.Backoff(context.WithoutCancel(ctx), key, t.Limit, d)
	}
	if lease != nil {
		resp.Body = &releasingBody{ReadCloser: resp.Body, lease: lease}
	}
	return resp, nil
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
