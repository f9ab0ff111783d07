package downstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
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

// frozenRedis starts an embedded Redis whose clock stands still, so that
// the figures an example prints are exact, and a Throttle on it.
func frozenRedis() (*throttle.Throttle, func()) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	th, err := throttle.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	return th, func() { th.Close(); rdb.Close(); m.Close() }
}

// chatRequest and chatResponse are the shapes of an OpenAI-style chat
// completion.
type chatRequest struct {
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	MaxTokens int64  `json:"max_tokens"`
}

type chatResponse struct {
	Usage struct {
		TotalTokens int64 `json:"total_tokens"`
	} `json:"usage"`
}

// chatClient stands in for an LLM SDK such as openai-go: it sends a chat
// completion through its http.Client and retries a 429 twice, unless the
// answer says x-should-retry: false, as openai-go and anthropic-sdk-go
// honour.
type chatClient struct {
	http *http.Client
	url  string
}

func (c *chatClient) complete(ctx context.Context, prompt string, maxTokens int64) (int64, error) {
	body, _ := json.Marshal(chatRequest{Model: "gpt-x", Prompt: prompt, MaxTokens: maxTokens})
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return 0, err
		}
		var out chatResponse
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("X-Should-Retry") != "false" && try < 2:
			continue
		case resp.StatusCode != http.StatusOK:
			return 0, fmt.Errorf("%s (%s)", resp.Status, resp.Header.Get(downstream.RefusalHeader))
		}
		return out.Usage.TotalTokens, err
	}
}

// estimateTokens is a request's cost before it is sent: its prompt's
// tokens (about 4 bytes each) and the most it may write. It reads the
// body through GetBody, leaving the request's own unread.
func estimateTokens(req *http.Request) int64 {
	if req.GetBody == nil {
		return 1
	}
	b, err := req.GetBody()
	if err != nil {
		return 1
	}
	var cr chatRequest
	if json.NewDecoder(b).Decode(&cr) != nil {
		return 1
	}
	return int64(len(cr.Prompt))/4 + cr.MaxTokens
}

// usedTokens is a call's real cost: the usage its answer reports.
func usedTokens(_ *http.Response, body []byte) (int64, bool) {
	var out chatResponse
	if json.Unmarshal(body, &out) != nil || out.Usage.TotalTokens <= 0 {
		return 0, false
	}
	return out.Usage.TotalTokens, true
}

// An OpenAI-style SDK over the Transport, with nothing but the
// Transport's options: each call books its estimated tokens and the call
// itself (tokens a minute and requests a minute, in one reservation),
// and is settled to the tokens its answer reports; the bucket follows
// the x-ratelimit-* fields. When sluice refuses a call (here the fleet
// is paused longer than the call may wait) the SDK gets a 429 that says
// x-should-retry: false, and sends nothing more.
func ExampleTransport_llmTokens() {
	th, stop := frozenRedis()
	defer stop()
	var calls atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("x-ratelimit-limit-tokens", "90000")
		w.Header().Set("x-ratelimit-remaining-tokens", "89000")
		w.Header().Set("x-ratelimit-reset-tokens", "666ms")
		fmt.Fprint(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":120}}`)
	}))
	defer api.Close()

	lim := throttle.Limit{Name: "llm", Rate: 90000, Per: time.Minute, Burst: 20000, MaxWait: 10 * time.Second,
		Also: []throttle.Rate{{Rate: 500, Per: time.Minute, Burst: 50, Counts: throttle.CountsCalls}}}
	sdk := &chatClient{url: api.URL + "/v1/chat/completions", http: &http.Client{Transport: &downstream.Transport{
		Throttle: th,
		Limit:    lim,
		Key:      func(*http.Request) string { return "openai" },
		Cost:     estimateTokens, // books 8/4 + 500 = 502 tokens and one request
		Settle:   usedTokens,     // then settles the tokens to 120
	}}}
	ctx := context.Background()
	used, err := sdk.complete(ctx, "say hi!!", 500)
	fmt.Println("used", used, "tokens", err)
	// The bucket of 20,000 tokens holds 19,880: the settled call's 120
	// are all it took.
	r, _ := th.Peek(ctx, "openai", lim, 19880)
	fmt.Println("19880 tokens due in", r.Delay)

	if _, err := th.Pause(ctx, "openai", lim, time.Minute); err != nil { // another worker saw a 429
		panic(err)
	}
	_, err = sdk.complete(ctx, "say hi!!", 500)
	fmt.Println(err)
	fmt.Println("the API saw", calls.Load(), "call")
	// Output:
	// used 120 tokens <nil>
	// 19880 tokens due in 0s
	// 429 Too Many Requests (too-far)
	// the API saw 1 call
}

// skipLimitCheck stands in for go-github's github.BypassRateLimitCheck,
// the context key that turns its own rate limiter off.
type skipLimitCheck struct{}

// repoClient stands in for go-github's client: after an answer that
// leaves its limit at 0, it refuses every call until the epoch reset
// itself, without sending it, unless the call's context carries
// skipLimitCheck, as go-github does unless given
// github.BypassRateLimitCheck.
type repoClient struct {
	http  *http.Client
	url   string
	reset time.Time // zero: no limit known to be spent
	now   func() time.Time
}

func (c *repoClient) get(ctx context.Context) error {
	if ctx.Value(skipLimitCheck{}) == nil && c.now().Before(c.reset) {
		return fmt.Errorf("rate limit spent until %v: not sent", c.reset.Format(time.TimeOnly))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Ratelimit-Remaining") == "0" {
		epoch, _ := strconv.ParseInt(resp.Header.Get("X-Ratelimit-Reset"), 10, 64)
		c.reset = time.Unix(epoch, 0)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s, Retry-After %s (%s)", resp.Status, resp.Header.Get("Retry-After"), resp.Header.Get(downstream.RefusalHeader))
	}
	return nil
}

// A go-github-style client over the Transport: with its own limiter on
// (left), it refuses calls by itself once GitHub says the limit is spent,
// so they never reach the Transport, whose fleet-wide pause until the
// reset they were to wait for; with it off (github.BypassRateLimitCheck
// in go-github), every call comes to the Transport, which pauses the
// fleet until the epoch reset and answers the calls that cannot wait so
// long with its own 429 and the time left.
func ExampleTransport_githubLimiterOff() {
	th, stop := frozenRedis()
	defer stop()
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", at.Format(http.TimeFormat))
		w.Header().Set("X-Ratelimit-Limit", "5000")
		w.Header().Set("X-Ratelimit-Remaining", "0")
		w.Header().Set("X-Ratelimit-Reset", strconv.FormatInt(at.Add(90*time.Second).Unix(), 10))
		w.Header().Set("X-Ratelimit-Resource", "core")
		fmt.Fprint(w, `{"full_name":"o/r"}`)
	}))
	defer api.Close()
	gh := &repoClient{url: api.URL + "/repos/o/r", now: func() time.Time { return at }, http: &http.Client{Transport: &downstream.Transport{
		Throttle: th,
		Limit:    throttle.Limit{Name: "github", Rate: 5000, Per: time.Hour, MaxWait: 10 * time.Second},
		Key:      func(*http.Request) string { return "github" },
	}}}
	fmt.Println(gh.get(context.Background()))
	fmt.Println("limiter on: ", gh.get(context.Background()))
	fmt.Println("limiter off:", gh.get(context.WithValue(context.Background(), skipLimitCheck{}, true)))
	// Output:
	// <nil>
	// limiter on:  rate limit spent until 12:01:30: not sent
	// limiter off: 429 Too Many Requests, Retry-After 80 (too-far)
}
