package downstream_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/throttle"
)

// An http.Client whose Transport takes a fleet-wide throttle slot before
// each request, against the fake API of package downstreamtest. When the
// API answers 429 with "Retry-After: 30", the Transport pauses the key for
// every worker sharing the Redis, and the next request does not reach the
// API: it gets a 429 of sluice's own at once (Sluice-Refusal: too-far,
// and x-should-retry: false for an SDK), and OwnRefusal gives its
// *throttle.TooFarError. The throttle decides
// on the Redis server's clock, which the embedded Redis holds still, so
// the pause reads exactly 30s.
func ExampleTransport() {
	api := downstreamtest.NewServer(downstreamtest.Config{Rate: 100})
	defer api.Close()

	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	th, err := throttle.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer th.Close()

	client := &http.Client{Transport: &downstream.Transport{
		Throttle: th,
		Limit:    throttle.Limit{Name: "orders-api", Rate: 50, Burst: 3, MaxWait: time.Second},
		Key:      func(*http.Request) string { return "orders-api" }, // default: the request's host
	}}
	get := func() {
		resp, err := client.Get(api.URL() + "/orders")
		if err != nil {
			panic(err)
		}
		var far *throttle.TooFarError
		if errors.As(downstream.OwnRefusal(resp), &far) {
			fmt.Printf("not sent (%s): %s paused %v more\n", resp.Header.Get(downstream.RefusalHeader), far.Key, far.Paused)
			resp.Body.Close()
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Println(resp.Status, "Retry-After:", ra)
			return
		}
		fmt.Println(resp.Status)
	}

	get()
	get()
	api.SetFault(downstreamtest.Fault429Seconds(30))
	get()
	get()
	fmt.Println("the API saw", api.Counts().Total, "calls")
	// Output:
	// 200 OK
	// 200 OK
	// 429 Too Many Requests Retry-After: 30
	// not sent (too-far): orders-api paused 30s more
	// the API saw 3 calls
}

// ParseFeedback reads what a response says of the caller's rate limit,
// whatever the header family. Times are read against the now passed in.
func ExampleParseFeedback() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	// A 429 with an HTTP-date Retry-After, 90 seconds ahead.
	h := http.Header{}
	h.Set("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat))
	fb := downstream.ParseFeedback(http.StatusTooManyRequests, h, now)
	fmt.Printf("%q %v\n", fb.Refused, fb.RetryAfter)

	// A 200 with the IETF RateLimit field: nothing left for 12 seconds.
	h = http.Header{}
	h.Set("RateLimit", `"default";r=0;t=12`)
	fb = downstream.ParseFeedback(http.StatusOK, h, now)
	fmt.Printf("%q %d %v\n", fb.Refused, fb.Remaining, fb.Reset)

	// GitHub-style X-RateLimit fields with an epoch reset.
	h = http.Header{}
	h.Set("X-RateLimit-Limit", "5000")
	h.Set("X-RateLimit-Remaining", "4999")
	h.Set("X-RateLimit-Reset", fmt.Sprint(now.Add(time.Hour).Unix()))
	fb = downstream.ParseFeedback(http.StatusOK, h, now)
	fmt.Printf("%q %d %v\n", fb.Refused, fb.Remaining, fb.Reset)

	// A 429 that says nothing.
	fb = downstream.ParseFeedback(http.StatusTooManyRequests, http.Header{}, now)
	fmt.Printf("%q %v %d\n", fb.Refused, fb.HasRetryAfter, fb.Remaining)

	// OpenAI: one request left of 60 a minute, the bucket full again in
	// 6 minutes, refilling steadily: the next unit comes in 6s, not 6m.
	h = http.Header{}
	h.Set("X-Ratelimit-Limit-Requests", "60")
	h.Set("X-Ratelimit-Remaining-Requests", "0")
	h.Set("X-Ratelimit-Reset-Requests", "6m0s")
	fb = downstream.ParseFeedback(http.StatusOK, h, now)
	fmt.Println(fb.Remaining, fb.Reset, fb.Full, fb.Next())
	// Output:
	// "rate" 1m30s
	// "" 0 12s
	// "" 4999 1h0m0s
	// "rate" false -1
	// 0 6m0s true 6s
}

// PauseOf is the pause Transport takes after a response: what it asks
// for, DefaultBackoff for a refusal that says nothing, or 0 while quota
// is left.
func ExamplePauseOf() {
	for _, r := range []struct {
		status int
		field  string
		value  string
	}{
		{http.StatusTooManyRequests, "Retry-After", "90"},
		{http.StatusOK, "RateLimit", `"default";r=0;t=12`}, // the next call would be refused
		{http.StatusOK, "X-RateLimit-Remaining", "4999"},
		{http.StatusTooManyRequests, "", ""},
		{http.StatusServiceUnavailable, "", ""},
	} {
		resp := &http.Response{StatusCode: r.status, Header: http.Header{}}
		if r.field != "" {
			resp.Header.Set(r.field, r.value)
		}
		fmt.Println(r.status, downstream.PauseOf(resp))
	}
	// Output:
	// 429 1m30s
	// 200 12s
	// 200 0s
	// 429 1s
	// 503 1s
}
