package downstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/throttle"
)

// frozenThrottle returns a Throttle on a miniredis whose clock stands
// still, so that what the tests read of a bucket is exact, and the
// miniredis.
func frozenThrottle(t *testing.T) (*throttle.Throttle, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	th, err := throttle.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { th.Close() })
	return th, m
}

// answering is a Base that answers every request with status and the
// header fields kv, and a body.
func answering(status int, body string, kv ...string) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	})
}

func send(t *testing.T, tr http.RoundTripper, ctx context.Context) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.example/v1/x", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// peek is what a call of n units would wait now, and the pause in it.
func peek(t *testing.T, th *throttle.Throttle, lim throttle.Limit, n int64) throttle.Reservation {
	t.Helper()
	lim.MaxWait = time.Hour
	r, err := th.Peek(context.Background(), "api.example", lim, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTransportFollowsTheAPI: the bucket holds no more than the API
// reports left (Shopify's used/max), less the headroom, and never takes
// the API's word for more than it holds itself.
func TestTransportFollowsTheAPI(t *testing.T) {
	lim := throttle.Limit{Name: "shop", Rate: 2, Burst: 40, Guard: -1}
	for _, s := range []struct {
		name     string
		level    string
		headroom float64
		left     int64 // what the bucket holds after one call
	}{
		{"another client took most", "36/40", 0, 4},
		{"headroom for the other client", "20/40", 0.25, 10},
		{"the API reports more than the bucket holds", "1/40", 0, 39},
		{"headroom beyond what is left", "35/40", 0.25, 0},
	} {
		th, _ := frozenThrottle(t)
		tr := &Transport{Throttle: th, Limit: lim, Headroom: s.headroom,
			Base: answering(200, "", "X-Shopify-Shop-Api-Call-Limit", s.level)}
		send(t, tr, context.Background())
		if s.left == 0 {
			// nothing to peek: the next call waits an interval
		} else if r := peek(t, th, lim, s.left); r.Delay != 0 {
			t.Errorf("%s: a call of %d waits %v; want it due now", s.name, s.left, r.Delay)
		}
		if r := peek(t, th, lim, s.left+1); r.Delay != 500*time.Millisecond {
			t.Errorf("%s: a call of %d waits %v; want one interval, 500ms", s.name, s.left+1, r.Delay)
		}
	}
}

// TestTransportFullInR: an OpenAI-style 200 with nothing left, full again
// in a minute at 60 a minute, pauses the key for the next unit's second,
// not for the minute; a 429 that says so steps the pace down, the 200
// does not.
func TestTransportFullInR(t *testing.T) {
	lim := throttle.Limit{Name: "llm", Rate: 60, Per: time.Minute}
	vendor := []string{"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1m0s"}
	th, _ := frozenThrottle(t)
	send(t, &Transport{Throttle: th, Limit: lim, Base: answering(200, "", vendor...)}, context.Background())
	r := peek(t, th, lim, 1)
	if r.Paused != time.Second || r.Delay > 2*time.Second || r.Share != 1 {
		t.Fatalf("after a 200 with nothing left, full in 1m: %+v; want a pause of 1s, the pace whole", r)
	}
	th, _ = frozenThrottle(t)
	send(t, &Transport{Throttle: th, Limit: lim, Base: answering(429, "", vendor...)}, context.Background())
	r = peek(t, th, lim, 1)
	if r.Paused != time.Second || r.Share >= 1 {
		t.Fatalf("after a 429, full in 1m: %+v; want a pause of 1s and the pace stepped down", r)
	}
}

// TestTransportRefusalsToldApart: a concurrency refusal and an overload
// pause the key briefly, step nothing down and give the call's booking
// back; a rate refusal does step down, and the call stays booked.
func TestTransportRefusalsToldApart(t *testing.T) {
	// 10 units a minute (6s a unit), burst 10.
	lim := throttle.Limit{Name: "api", Rate: 10, Per: time.Minute, Burst: 10, Guard: -1}
	for _, s := range []struct {
		name   string
		status int
		kv     []string
		pause  time.Duration
		refund bool
	}{
		{"Stripe concurrency", 429, []string{"Stripe-Rate-Limited-Reason", "global-concurrency"}, ConcurrencyBackoff, true},
		{"Anthropic overloaded", 529, nil, DefaultBackoff, true},
		{"OpenAI 503", 503, nil, DefaultBackoff, true},
		{"Stripe rate", 429, []string{"Stripe-Rate-Limited-Reason", "global-rate"}, DefaultBackoff, false},
	} {
		th, _ := frozenThrottle(t)
		ctx := context.Background()
		// The call's 4 units, then 10 more booked behind it: the bucket's
		// TAT is 84s ahead, beyond where the pause puts it (its end plus
		// 9 units, 55s), so that giving the 4 back shows.
		r, err := th.Reserve(ctx, "api.example", lim, 4)
		if err != nil || !r.OK {
			t.Fatal(r, err)
		}
		if _, err := th.Reserve(ctx, "api.example", throttle.Limit{Name: "api", Rate: 10, Per: time.Minute, Burst: 10, Guard: -1, MaxWait: time.Hour}, 10); err != nil {
			t.Fatal(err)
		}
		tr := &Transport{Throttle: th, Limit: lim, Base: answering(s.status, `{"error":{}}`, s.kv...)}
		send(t, tr, WithReservation(ctx, r))
		p := peek(t, th, lim, 1)
		if p.Paused != s.pause || (p.Share < 1) == s.refund {
			t.Errorf("%s: paused %v, share %v; want %v paused, stepped down %v", s.name, p.Paused, p.Share, s.pause, !s.refund)
		}
		// A unit waits TAT + 6s - 60s: 6s with the 4 given back, 30s (or
		// more, at a stepped-down pace) without.
		if refunded := p.Delay <= 6*time.Second; refunded != s.refund {
			t.Errorf("%s: a unit waits %v; want the call's 4 units given back: %v", s.name, p.Delay, s.refund)
		}
	}
}

// TestTransportLowersCallsInFlight: against a cap of 2 in flight that
// refuses as Stripe does, 6 callers at once draw a few refusals, after
// which the Transport keeps to what the API allows; the pace is never
// stepped down.
func TestTransportLowersCallsInFlight(t *testing.T) {
	api := downstreamtest.NewServer(downstreamtest.Config{MaxConcurrent: 2, Latency: 20 * time.Millisecond, ConcurrencyReason: "global-concurrency"})
	defer api.Close()
	th, _ := frozenThrottle(t)
	lim := throttle.Limit{Name: "stripe", Rate: 1000, Burst: 100, MaxWait: time.Minute}
	tr := &Transport{Throttle: th, Limit: lim}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				req, _ := http.NewRequest(http.MethodPost, api.URL()+"/v1/charges", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.StatusCode == 429 {
					refused.Add(1)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	// 60 calls of 6 callers: without a cap of its own the Transport would
	// send 6 at once each round, 4 of them refused (40 in all).
	if n := refused.Load(); n > 12 {
		t.Errorf("%d of 60 calls refused for concurrency; want the Transport to keep to the API's 2 after the first few", n)
	}
	r, err := th.Peek(context.Background(), api.URL()[len("http://"):], lim, 1)
	if err != nil || r.Share != 1 {
		t.Errorf("after concurrency refusals the pace is %v (%v); want it whole", r.Share, err)
	}
}

// TestTransportCostAndSettle: a request books its estimated cost and is
// settled to the cost its response reports, in one reservation with the
// request itself (tokens a minute and requests a minute).
func TestTransportCostAndSettle(t *testing.T) {
	lim := throttle.Limit{Name: "llm", Rate: 6000, Per: time.Minute, Burst: 6000, Guard: -1,
		Also: []throttle.Rate{{Rate: 60, Per: time.Minute, Burst: 60, Counts: throttle.CountsCalls}}}
	th, _ := frozenThrottle(t)
	tr := &Transport{Throttle: th, Limit: lim,
		Cost: func(*http.Request) int64 { return 1000 },
		Settle: func(resp *http.Response, body []byte) (int64, bool) {
			if !strings.Contains(string(body), `"total_tokens":250`) {
				return 0, false
			}
			return 250, true
		},
		Base: answering(200, `{"choices":[],"usage":{"total_tokens":250}}`)}
	send(t, tr, context.Background())
	// 6000 tokens less the 250 used: a call of 5750 is due now, one of
	// 5751 waits a token's 10ms.
	if r := peek(t, th, lim, 5750); r.Delay != 0 {
		t.Fatalf("after a call settled at 250 tokens, a call of 5750 waits %v", r.Delay)
	}
	if r := peek(t, th, lim, 5751); r.Delay != 10*time.Millisecond {
		t.Fatalf("a call of 5751 waits %v; want 10ms", r.Delay)
	}
	// The request was booked too: 59 calls are left of 60.
	if n, err := th.Observe(context.Background(), "api.example", lim, throttle.Level{Bucket: 1, Left: 59}); err != nil || n != 0 {
		t.Fatalf("the requests' bucket moved by a level of 59 (%d, %v): the request was not booked", n, err)
	}
	if n, err := th.Observe(context.Background(), "api.example", lim, throttle.Level{Bucket: 1, Left: 58}); err != nil || n != 1 {
		t.Fatalf("the requests' bucket did not move to 58 (%d, %v): it holds more than 59", n, err)
	}
}

// TestTransportHandedReservation: the first request with a reservation
// handed over uses it; the next (an SDK's retry) books its own, and gets
// sluice's own 429, which no SDK retries, when none is near.
func TestTransportHandedReservation(t *testing.T) {
	th, _ := frozenThrottle(t)
	lim := throttle.Limit{Name: "api", Rate: 1, Per: time.Hour, MaxWait: time.Second}
	r, err := th.Reserve(context.Background(), "api.example", lim, 1)
	if err != nil || !r.OK {
		t.Fatal(r, err)
	}
	calls := 0
	tr := &Transport{Throttle: th, Limit: lim, Base: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		calls++
		return &http.Response{StatusCode: 500, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
	})}
	ctx := WithReservation(context.Background(), r)
	if resp := send(t, tr, ctx); resp.StatusCode != 500 || calls != 1 {
		t.Fatalf("the first request: %d after %d calls; want it sent on the handed slot", resp.StatusCode, calls)
	}
	resp := send(t, tr, ctx)
	var far *throttle.TooFarError
	if calls != 1 || resp.StatusCode != 429 || !errors.As(OwnRefusal(resp), &far) {
		t.Fatalf("the retry: %d, %v after %d calls; want sluice's 429 for a slot an hour away", resp.StatusCode, OwnRefusal(resp), calls)
	}
	for k, want := range map[string]string{"X-Should-Retry": "false", "Stripe-Should-Retry": "false", RefusalHeader: "too-far"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if ra := resp.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After %q", ra)
	}
}

// TestTransportUnavailable: with Redis unreachable and no fallback, the
// request is not sent and its caller gets sluice's 429, not an error an
// SDK would retry.
func TestTransportUnavailable(t *testing.T) {
	th, m := frozenThrottle(t)
	m.Close()
	sent := false
	tr := &Transport{Throttle: th, Limit: throttle.Limit{Rate: 10}, Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent = true
		return nil, errors.New("sent")
	})}
	resp := send(t, tr, context.Background())
	if sent || resp.StatusCode != 429 || !errors.Is(OwnRefusal(resp), throttle.ErrUnavailable) || resp.Header.Get(RefusalHeader) != "unavailable" {
		t.Fatalf("sent %v, %d, %v", sent, resp.StatusCode, OwnRefusal(resp))
	}
}
