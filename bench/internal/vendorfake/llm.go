package vendorfake

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// LLMConfig is the quota of an OpenAI- or Anthropic-style fake.
type LLMConfig struct {
	// RPM is requests a minute; TPM tokens a minute (OpenAI: prompt and
	// completion together; Anthropic: input tokens, with OutputTPM for
	// the output tokens, 0 for no such limit).
	RPM, TPM, OutputTPM int64
	// StartRequests is the requests left at the first call (another
	// client has used the rest, full again a minute later); negative for
	// a full bucket. StartTokens the same for tokens.
	StartRequests, StartTokens int64
	// Latency is the answer time of an admitted call.
	Latency Latency
	// Overload is the share of calls refused as overloaded (OpenAI 503,
	// Anthropic 529 overloaded_error), charged nothing.
	Overload float64
	// RetryAfter makes OpenAI's 429s carry retry-after (whole seconds)
	// and retry-after-ms; the real API leaves them out on most answers.
	// Anthropic's carry retry-after always, as documented.
	RetryAfter bool
	// Model names the model in bodies and messages.
	Model string
	// Seed fixes the completions' lengths, the overloads and the
	// latencies.
	Seed uint64
}

// llm is the quota both LLM fakes share: continuously refilled buckets
// of requests and tokens a minute (OpenAI: "your rate limit ... is
// replenished continuously"; Anthropic: a token bucket), charged a
// call's real tokens when it arrives, its completion's length drawn from
// [max_tokens/4, max_tokens].
type llm struct {
	cfg  LLMConfig
	rec  *record
	now  func() time.Time
	mu   sync.Mutex
	req  *bucket
	in   *bucket // tokens (OpenAI), input tokens (Anthropic)
	out  *bucket // output tokens (Anthropic), nil when unlimited
	rnd  *rand.Rand
	seq  int
	name string
}

func newLLM(vendor string, cfg LLMConfig, now time.Time) *llm {
	start := func(s, c int64) float64 {
		if s < 0 {
			return float64(c)
		}
		return float64(s)
	}
	l := &llm{cfg: cfg, rec: newRecord(vendor, cfg.Latency, cfg.Seed), now: time.Now, name: vendor,
		req: newBucket(float64(cfg.RPM), time.Minute, start(cfg.StartRequests, cfg.RPM), now),
		in:  newBucket(float64(cfg.TPM), time.Minute, start(cfg.StartTokens, cfg.TPM), now),
		rnd: rand.New(rand.NewPCG(cfg.Seed, 0x11f))}
	if cfg.OutputTPM > 0 {
		l.out = newBucket(float64(cfg.OutputTPM), time.Minute, float64(cfg.OutputTPM), now)
	}
	if l.cfg.Model == "" {
		l.cfg.Model = "gpt-fake"
	}
	return l
}

// call is one request as the quota sees it.
type call struct {
	prompt, maxTokens int64
}

// verdict is the quota's answer to one call.
type verdict struct {
	reason     string // "" when admitted
	prompt     int64
	completion int64
	wait       time.Duration // for a refusal: until the call would pass
}

// decide admits c at now or says why not; an admitted call is charged.
func (l *llm) decide(now time.Time, c call) verdict {
	l.seq++
	if l.seq == 1 {
		// The buckets start as configured at the first call, however
		// long after the start it comes.
		for _, b := range []*bucket{l.req, l.in, l.out} {
			if b != nil {
				b.at = now
			}
		}
	}
	if l.cfg.Overload > 0 && l.rnd.Float64() < l.cfg.Overload {
		return verdict{reason: "overloaded"}
	}
	lo := max(c.maxTokens/4, 1)
	completion := lo + l.rnd.Int64N(c.maxTokens-lo+1)
	v := verdict{prompt: c.prompt, completion: completion}
	inCost := float64(c.prompt + completion)
	if l.out != nil {
		inCost = float64(c.prompt)
	}
	switch {
	case l.req.avail(now) < 1:
		v.reason, v.wait = "requests", l.req.until(now, 1)
	case l.in.avail(now) < inCost:
		v.reason, v.wait = "tokens", l.in.until(now, inCost)
	case l.out != nil && l.out.avail(now) < float64(completion):
		v.reason, v.wait = "output_tokens", l.out.until(now, float64(completion))
	default:
		l.req.take(now, 1)
		l.in.take(now, inCost)
		if l.out != nil {
			l.out.take(now, float64(completion))
		}
	}
	return v
}

// parseCall reads the prompt's size (a token per 4 bytes of the messages,
// and of system, as JSON) and max_tokens (or max_completion_tokens;
// default 256) of a chat request body.
func parseCall(body []byte) call {
	var b struct {
		Messages            json.RawMessage `json:"messages"`
		System              json.RawMessage `json:"system"`
		MaxTokens           int64           `json:"max_tokens"`
		MaxCompletionTokens int64           `json:"max_completion_tokens"`
	}
	_ = json.Unmarshal(body, &b)
	c := call{prompt: max(int64(len(b.Messages)+len(b.System)+3)/4, 1), maxTokens: 256}
	if b.MaxCompletionTokens > 0 {
		c.maxTokens = b.MaxCompletionTokens
	} else if b.MaxTokens > 0 {
		c.maxTokens = b.MaxTokens
	}
	return c
}

// serve runs one call through decide, records it, and answers it with
// the vendor's words (answer).
func (l *llm) serve(w http.ResponseWriter, req *http.Request, answer func(h http.Header, now time.Time, v verdict, seq int) (int, any)) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	c := parseCall(body)
	now := l.now()
	l.mu.Lock()
	v := l.decide(now, c)
	status, out := answer(w.Header(), now, v, l.seq)
	l.mu.Unlock()
	a := Arrival{At: now.UnixMicro(), Path: req.URL.Path, Status: status, Reason: v.reason, Idem: req.Header.Get("Idempotency-Key")}
	if v.reason == "" {
		a.Tokens, a.Output = v.prompt+v.completion, v.completion
	}
	if lat := l.rec.add(a); v.reason == "" {
		sleep(req, lat)
		l.rec.done()
	}
	writeJSON(w, status, out)
}

func (l *llm) stats() Stats { s, _ := l.rec.snapshot(); return s }

// OpenAI is an OpenAI-style chat completions API (POST
// /v1/chat/completions) with requests and tokens a minute. Every answer
// carries x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the
// reset being the time until the bucket is full again written as OpenAI
// writes it ("1s", "6m0s", "120ms"); a refusal is a 429 with OpenAI's
// error body (type requests or tokens, code rate_limit_exceeded, "Please
// try again in 1.2s"); an overload a 503. An admitted call's body holds
// usage.prompt_tokens, completion_tokens and total_tokens.
type OpenAI struct{ *llm }

// NewOpenAI returns the fake with its buckets as cfg says at now.
func NewOpenAI(cfg LLMConfig, now time.Time) *OpenAI { return &OpenAI{newLLM("openai", cfg, now)} }

// Stats are the fake's figures.
func (o *OpenAI) Stats() Stats { return o.stats() }

func (o *OpenAI) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if serveRecord(w, req, o.stats, o.rec) {
		return
	}
	o.serve(w, req, o.answer)
}

// openAIDuration writes d as OpenAI's reset headers do.
func openAIDuration(d time.Duration) string { return d.Round(time.Millisecond).String() }

func (o *OpenAI) answer(h http.Header, now time.Time, v verdict, seq int) (int, any) {
	h.Set("x-request-id", fmt.Sprintf("req_%08d", seq))
	if v.reason == "overloaded" {
		return http.StatusServiceUnavailable, map[string]any{"error": map[string]any{
			"message": "The server is overloaded or not ready yet.", "type": "server_error", "param": nil, "code": nil}}
	}
	h.Set("x-ratelimit-limit-requests", strconv.FormatInt(o.cfg.RPM, 10))
	h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(o.cfg.TPM, 10))
	h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(int64(math.Floor(o.req.avail(now))), 10))
	h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(int64(math.Floor(o.in.avail(now))), 10))
	h.Set("x-ratelimit-reset-requests", openAIDuration(o.req.untilFull(now)))
	h.Set("x-ratelimit-reset-tokens", openAIDuration(o.in.untilFull(now)))
	if v.reason != "" {
		if o.cfg.RetryAfter {
			h.Set("retry-after", strconv.FormatInt(int64(math.Ceil(v.wait.Seconds())), 10))
			h.Set("retry-after-ms", strconv.FormatInt(v.wait.Milliseconds(), 10))
		}
		what, limit, used, asked := "requests per min (RPM)", o.cfg.RPM, o.cfg.RPM-int64(o.req.avail(now)), int64(1)
		if v.reason == "tokens" {
			what, limit, used, asked = "tokens per min (TPM)", o.cfg.TPM, o.cfg.TPM-int64(o.in.avail(now)), v.prompt+v.completion
		}
		return http.StatusTooManyRequests, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("Rate limit reached for %s in organization org-fake on %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
				o.cfg.Model, what, limit, used, asked, openAIDuration(v.wait)),
			"type": v.reason, "param": nil, "code": "rate_limit_exceeded"}}
	}
	return http.StatusOK, map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", seq), "object": "chat.completion", "created": now.Unix(), "model": o.cfg.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "ok", "refusal": nil}}},
		"usage": map[string]any{"prompt_tokens": v.prompt, "completion_tokens": v.completion, "total_tokens": v.prompt + v.completion},
	}
}

// Anthropic is an Anthropic-style Messages API (POST /v1/messages) with
// requests, input tokens and output tokens a minute. Every answer
// carries anthropic-ratelimit-{requests,input-tokens,output-tokens,
// tokens}-{limit,remaining,reset}, the reset the RFC 3339 time at which
// the bucket is full again; a refusal is a 429 rate_limit_error with
// retry-after (whole seconds until the call would pass); an overload a
// 529 overloaded_error, charged nothing.
type Anthropic struct{ *llm }

// NewAnthropic returns the fake with its buckets as cfg says at now.
func NewAnthropic(cfg LLMConfig, now time.Time) *Anthropic {
	if cfg.Model == "" {
		cfg.Model = "claude-fake"
	}
	return &Anthropic{newLLM("anthropic", cfg, now)}
}

// Stats are the fake's figures.
func (a *Anthropic) Stats() Stats { return a.stats() }

func (a *Anthropic) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if serveRecord(w, req, a.stats, a.rec) {
		return
	}
	a.serve(w, req, a.answer)
}

func (a *Anthropic) answer(h http.Header, now time.Time, v verdict, seq int) (int, any) {
	h.Set("request-id", fmt.Sprintf("req_%08d", seq))
	if v.reason == "overloaded" {
		return 529, map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}}
	}
	set := func(name string, limit int64, b *bucket) {
		h.Set("anthropic-ratelimit-"+name+"-limit", strconv.FormatInt(limit, 10))
		h.Set("anthropic-ratelimit-"+name+"-remaining", strconv.FormatInt(int64(math.Floor(b.avail(now))), 10))
		// Whole seconds, rounded up: the bucket is full by then.
		h.Set("anthropic-ratelimit-"+name+"-reset", now.Add(b.untilFull(now)+time.Second-1).UTC().Truncate(time.Second).Format(time.RFC3339))
	}
	set("requests", a.cfg.RPM, a.req)
	set("input-tokens", a.cfg.TPM, a.in)
	tightest, tightLimit := a.in, a.cfg.TPM
	if a.out != nil {
		set("output-tokens", a.cfg.OutputTPM, a.out)
		if a.out.avail(now)/a.out.capacity < a.in.avail(now)/a.in.capacity {
			tightest, tightLimit = a.out, a.cfg.OutputTPM
		}
	}
	set("tokens", tightLimit, tightest)
	if v.reason != "" {
		h.Set("retry-after", strconv.FormatInt(int64(math.Ceil(v.wait.Seconds())), 10))
		what := map[string]string{"requests": "requests", "tokens": "input tokens", "output_tokens": "output tokens"}[v.reason]
		limit := map[string]int64{"requests": a.cfg.RPM, "tokens": a.cfg.TPM, "output_tokens": a.cfg.OutputTPM}[v.reason]
		return http.StatusTooManyRequests, map[string]any{"type": "error", "error": map[string]any{"type": "rate_limit_error",
			"message": fmt.Sprintf("This request would exceed the rate limit for your organization (org-fake) of %d %s per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.", limit, what)}}
	}
	return http.StatusOK, map[string]any{
		"id": fmt.Sprintf("msg_%08d", seq), "type": "message", "role": "assistant", "model": a.cfg.Model,
		"content":     []any{map[string]any{"type": "text", "text": "ok"}},
		"stop_reason": "end_turn", "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": v.prompt, "output_tokens": v.completion},
	}
}
