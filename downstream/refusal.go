package downstream

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// RefusalHeader names the header field of a response Transport
// synthesizes for a refusal of sluice's own: "too-far" (the slot is
// further away than the Limit's MaxWait, or the key is paused), "busy"
// (every concurrency lease is held) or "unavailable" (Redis unreachable
// and no fallback).
const RefusalHeader = "Sluice-Refusal"

// refusalBody is the body of a synthesized refusal; it keeps the error.
type refusalBody struct {
	*strings.Reader
	err error
}

func (refusalBody) Close() error { return nil }

// OwnRefusal returns the error of sluice's own that a response Transport
// synthesized stands for (a *throttle.TooFarError, a *throttle.BusyError,
// or one wrapping throttle.ErrUnavailable), or nil for a response that
// came from the downstream. A caller of Transport's RoundTrip can test it
// with errors.As as it would the error.
func OwnRefusal(resp *http.Response) error {
	if resp == nil {
		return nil
	}
	if b, ok := resp.Body.(refusalBody); ok {
		return b.err
	}
	return nil
}

// refusal turns err, from booking a request's slot, into what the
// request's caller gets: for sluice's own refusals a 429 that SDKs do
// not retry (Retry-After and Retry-After-Ms say when a slot may be had;
// x-should-retry: false is honoured by openai-go and anthropic-sdk-go,
// Stripe-Should-Retry: false by stripe-go), so that their 2 or 3 retries
// do not each come back for a slot; any other error (ctx ended, an
// invalid Limit) as it is.
func refusal(req *http.Request, err error) (*http.Response, error) {
	var (
		far  *throttle.TooFarError
		busy *throttle.BusyError
		wait time.Duration
		why  string
	)
	switch {
	case errors.As(err, &far):
		wait, why = far.RetryAfter, "too-far"
	case errors.As(err, &busy):
		wait, why = busy.RetryAfter, "busy"
	case errors.Is(err, throttle.ErrUnavailable):
		wait, why = time.Second, "unavailable"
	default:
		return nil, err
	}
	wait = max(wait, time.Millisecond)
	body := fmt.Sprintf(`{"error":{"type":"sluice_refused","code":%q,"message":%q}}`, why, err.Error())
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	h.Set("Retry-After-Ms", strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10))
	h.Set("X-Should-Retry", "false")
	h.Set("Stripe-Should-Retry", "false")
	h.Set(RefusalHeader, why)
	return &http.Response{
		Status: "429 Too Many Requests", StatusCode: http.StatusTooManyRequests,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: refusalBody{strings.NewReader(body), err}, ContentLength: int64(len(body)),
		Request: req,
	}, nil
}

var _ io.ReadCloser = refusalBody{}
