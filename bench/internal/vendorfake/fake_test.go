package vendorfake

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a clock the test steps.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestParseLatency(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Latency
		bad  bool
	}{
		{in: "40ms", want: Latency{Min: 40 * time.Millisecond, Max: 40 * time.Millisecond}},
		{in: "20ms-60ms", want: Latency{Min: 20 * time.Millisecond, Max: 60 * time.Millisecond}},
		{in: "20ms-60ms,1%:2s", want: Latency{Min: 20 * time.Millisecond, Max: 60 * time.Millisecond, TailShare: 0.01, Tail: 2 * time.Second}},
		{in: "60ms-20ms", bad: true},
		{in: "fast", bad: true},
		{in: "20ms,1:2s", bad: true},
	} {
		got, err := ParseLatency(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: no error", tc.in)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if again, _ := ParseLatency(got.String()); again != got {
			t.Errorf("%q: String %q reads back as %+v", tc.in, got.String(), again)
		}
	}
}

func TestBucketRefillsContinuously(t *testing.T) {
	b := newBucket(60, time.Minute, 1, t0)
	steps := []struct {
		at       time.Duration
		take     bool
		untilOne time.Duration
		full     time.Duration
	}{
		{0, true, time.Second, time.Minute},
		{0, false, time.Second, time.Minute},
		{500 * time.Millisecond, false, 500 * time.Millisecond, 59500 * time.Millisecond},
		{time.Second, true, time.Second, time.Minute},
		{61 * time.Second, true, 0, time.Second}, // full at 60 s, one taken
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		if got := b.take(now, 1); got != s.take {
			t.Errorf("step %d: take %v, want %v", i, got, s.take)
		}
		if got := b.until(now, 1); got != s.untilOne {
			t.Errorf("step %d: until one %v, want %v", i, got, s.untilOne)
		}
		if got := b.untilFull(now); got != s.full {
			t.Errorf("step %d: until full %v, want %v", i, got, s.full)
		}
	}
}

// do sends one request to h and returns the answer and its JSON body.
func do(t *testing.T, h http.Handler, method, path, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(method, path, strings.NewReader(body)))
	var v map[string]any
	if err := json.Unmarshal(rr.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, rr.Body.String(), err)
	}
	return rr, v
}

const chat = `{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":100}`

func TestOpenAIResetIsTimeUntilFull(t *testing.T) {
	c := &clock{t0}
	o := NewOpenAI(LLMConfig{RPM: 60, TPM: 100_000, StartRequests: 1, StartTokens: -1, Seed: 1}, t0)
	o.now = c.now
	rr, body := do(t, o, "POST", "/v1/chat/completions", chat)
	if rr.Code != 200 {
		t.Fatalf("first call: %d", rr.Code)
	}
	if got := rr.Header().Get("x-ratelimit-remaining-requests"); got != "0" {
		t.Errorf("remaining-requests %q, want 0", got)
	}
	if got := rr.Header().Get("x-ratelimit-reset-requests"); got != "1m0s" {
		t.Errorf("reset-requests %q, want 1m0s (the time until full, not until the next request)", got)
	}
	usage := body["usage"].(map[string]any)
	if usage["total_tokens"].(float64) != usage["prompt_tokens"].(float64)+usage["completion_tokens"].(float64) || usage["completion_tokens"].(float64) < 25 {
		t.Errorf("usage %v", usage)
	}
	rr, body = do(t, o, "POST", "/v1/chat/completions", chat)
	e := body["error"].(map[string]any)
	if rr.Code != 429 || e["type"] != "requests" || e["code"] != "rate_limit_exceeded" || !strings.Contains(e["message"].(string), "Please try again in 1s.") {
		t.Errorf("second call: %d %v", rr.Code, body)
	}
	if rr.Header().Get("retry-after") != "" {
		t.Errorf("retry-after %q without RetryAfter", rr.Header().Get("retry-after"))
	}
	c.t = t0.Add(time.Second)
	if rr, _ = do(t, o, "POST", "/v1/chat/completions", chat); rr.Code != 200 {
		t.Errorf("a second later: %d, want 200", rr.Code)
	}
	st := o.Stats()
	if st.Calls != 3 || st.OK != 2 || st.Refused["requests"] != 1 || st.Tokens == 0 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestOpenAITokensPerMinute(t *testing.T) {
	c := &clock{t0}
	// 400 tokens: room for one call of at most 100 + its prompt, not
	// for a second.
	o := NewOpenAI(LLMConfig{RPM: 1000, TPM: 6000, StartRequests: -1, StartTokens: 130, Seed: 1}, t0)
	o.now = c.now
	if rr, _ := do(t, o, "POST", "/v1/chat/completions", chat); rr.Code != 200 {
		t.Fatalf("first call %d", rr.Code)
	}
	rr, body := do(t, o, "POST", "/v1/chat/completions", chat)
	if e, _ := body["error"].(map[string]any); rr.Code != 429 || e["type"] != "tokens" {
		t.Errorf("second call %d %v, want a 429 of type tokens", rr.Code, body)
	}
}

func TestAnthropicHeadersAndOverload(t *testing.T) {
	c := &clock{t0}
	a := NewAnthropic(LLMConfig{RPM: 50, TPM: 40_000, OutputTPM: 8000, StartRequests: 1, StartTokens: -1, Seed: 1}, t0)
	a.now = c.now
	rr, body := do(t, a, "POST", "/v1/messages", chat)
	if rr.Code != 200 || body["usage"].(map[string]any)["output_tokens"].(float64) < 25 {
		t.Fatalf("first call %d %v", rr.Code, body)
	}
	// Empty: full again 50 requests' interval × 50 = 60 s later.
	if got, want := rr.Header().Get("anthropic-ratelimit-requests-reset"), t0.Add(time.Minute).Format(time.RFC3339); got != want {
		t.Errorf("requests-reset %q, want %q", got, want)
	}
	for _, h := range []string{"anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-tokens-reset"} {
		if rr.Header().Get(h) == "" {
			t.Errorf("no %s", h)
		}
	}
	rr, body = do(t, a, "POST", "/v1/messages", chat)
	if e, _ := body["error"].(map[string]any); rr.Code != 429 || e["type"] != "rate_limit_error" || rr.Header().Get("retry-after") != "2" {
		t.Errorf("second call %d %v retry-after %q, want 429 rate_limit_error, retry-after 2 (1.2 s up)", rr.Code, body, rr.Header().Get("retry-after"))
	}
	over := NewAnthropic(LLMConfig{RPM: 50, TPM: 40_000, StartRequests: -1, StartTokens: -1, Overload: 1}, t0)
	rr, body = do(t, over, "POST", "/v1/messages", chat)
	if e, _ := body["error"].(map[string]any); rr.Code != 529 || e["type"] != "overloaded_error" {
		t.Errorf("overloaded: %d %v", rr.Code, body)
	}
	if st := over.Stats(); st.Tokens != 0 || st.Refused["overloaded"] != 1 {
		t.Errorf("an overload was charged: %+v", st)
	}
}

func TestShopifyLeakyBucket(t *testing.T) {
	c := &clock{t0}
	s := NewShopify(ShopifyConfig{Rate: 2, Bucket: 40}, t0)
	s.now = c.now
	for i := 1; i <= 40; i++ {
		rr, _ := do(t, s, "GET", "/store-1/admin/api/2024-01/orders.json", "")
		if want := itoa(i) + "/40"; rr.Code != 200 || rr.Header().Get("X-Shopify-Shop-Api-Call-Limit") != want {
			t.Fatalf("call %d: %d %q, want 200 %q", i, rr.Code, rr.Header().Get("X-Shopify-Shop-Api-Call-Limit"), want)
		}
	}
	rr, body := do(t, s, "GET", "/store-1/admin/api/2024-01/orders.json", "")
	if rr.Code != 429 || rr.Header().Get("Retry-After") != "2.0" || rr.Header().Get("X-Shopify-Shop-Api-Call-Limit") != "40/40" || body["errors"] == nil {
		t.Errorf("call 41: %d %v %v", rr.Code, rr.Header(), body)
	}
	// Another store has its own bucket.
	if rr, _ := do(t, s, "GET", "/store-2/admin/api/2024-01/orders.json", ""); rr.Code != 200 {
		t.Errorf("another store: %d", rr.Code)
	}
	c.t = t0.Add(500 * time.Millisecond) // one call leaked
	if rr, _ := do(t, s, "GET", "/store-1/admin/api/2024-01/orders.json", ""); rr.Code != 200 || rr.Header().Get("X-Shopify-Shop-Api-Call-Limit") != "40/40" {
		t.Errorf("after 500 ms: %d %q", rr.Code, rr.Header().Get("X-Shopify-Shop-Api-Call-Limit"))
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestShopifyOtherClient(t *testing.T) {
	s := NewShopify(ShopifyConfig{Rate: 2, Bucket: 40, Stores: 3, OtherShare: 0.5, OtherBurst: 10}, t0)
	// Half of 2/s in bursts of 10: a burst every 10 s at each store, the
	// first within the first 10 s.
	s.OtherTick(t0.Add(10 * time.Second))
	if o := s.Stats().Other; o.Calls != 30 || o.Refused != 0 {
		t.Errorf("after 10 s: %+v, want 30 calls, none refused", o)
	}
	// Fill store-0 from outside; its next burst is refused whole.
	for range 40 {
		s.take("store-0", s.next[0].Add(-time.Millisecond))
	}
	s.OtherTick(t0.Add(20 * time.Second))
	if o := s.Stats().Other; o.Calls != 60 || o.Refused < 9 {
		t.Errorf("after 20 s: %+v, want 60 calls, about 10 refused", o)
	}
}

func TestStripeLimiters(t *testing.T) {
	s := NewStripe(StripeConfig{Rate: 5, Concurrency: 3}, t0)
	want := []string{"", "", "", "concurrency"}
	for i, w := range want {
		if got := s.admit(t0); got != w {
			t.Errorf("request %d: %q, want %q", i+1, got, w)
		}
	}
	s.release()
	if got := s.admit(t0); got != "" {
		t.Errorf("after a release: %q", got)
	}
	if got := s.admit(t0); got != "rate" {
		t.Errorf("sixth request in the same instant: %q, want rate", got)
	}
	s.release()
	if got := s.admit(t0.Add(200 * time.Millisecond)); got != "" {
		t.Errorf("200 ms later: %q, want admitted", got)
	}
}

func TestStripeRefusalHeader(t *testing.T) {
	s := NewStripe(StripeConfig{Rate: 100, Concurrency: 0}, t0)
	rr, body := do(t, s, "POST", "/v1/charges", "")
	if rr.Code != 429 || rr.Header().Get("Stripe-Rate-Limited-Reason") != "global-concurrency" || body["error"].(map[string]any)["code"] != "rate_limit" {
		t.Errorf("%d %v %v", rr.Code, rr.Header(), body)
	}
}

func TestHooksEndpoints(t *testing.T) {
	h := NewHooks(HooksConfig{Healthy: 2, Slow: 1, Down: 1})
	eps, err := h.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	kinds := map[string]int{}
	for _, e := range eps {
		kinds[e.Kind]++
		if !strings.HasPrefix(e.URL, "http://127.0.0.1:") {
			t.Errorf("%s at %q", e.Name, e.URL)
		}
	}
	if kinds["healthy"] != 2 || kinds["slow"] != 1 || kinds["down"] != 1 {
		t.Fatalf("endpoints %v", eps)
	}
	resp, err := http.Post(eps[0].URL+"/hook/1", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthy receiver: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := http.Post(eps[3].URL+"/hook/1", "application/json", strings.NewReader("{}")); err == nil {
		resp.Body.Close()
		t.Errorf("the down receiver answered %d", resp.StatusCode)
	}
	_, arr := h.rec.snapshot()
	if len(arr) != 1 || arr[0].Key != "healthy-01" || arr[0].Path != "/hook/1" {
		t.Errorf("arrivals %+v", arr)
	}
	rr, _ := do(t, h, "GET", "/stats", "")
	if rr.Code != 200 {
		t.Errorf("/stats %d", rr.Code)
	}
}
