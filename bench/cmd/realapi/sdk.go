package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/throttle"
)

// The sdk-openai case's API: requests and tokens a minute, its buckets
// full at the start. A call costs about 10 prompt and 50-200 completion
// tokens, so that at the RPM calls would use some 680 tokens a second
// against the 200 a second of the TPM: the tokens bind within the span.
const (
	sdkRPM       = 300
	sdkTPM       = 12_000
	sdkCallers   = 8
	sdkSpan      = 40 * time.Second
	sdkMaxTokens = 200
)

// sdkTransport is where the SDK meets sluice: the HTTP client's
// Transport. Each call books its upper bound of tokens (its prompt, about
// 10, and its max_tokens) and the call itself in one reservation (the
// tokens a minute, with the requests a minute as an Also counting
// calls), and is settled to the usage.total_tokens its answer reports;
// the buckets follow the x-ratelimit-* fields of every answer.
func sdkTransport(th *throttle.Throttle) http.RoundTripper {
	return &downstream.Transport{Throttle: th,
		Limit: throttle.Limit{Name: "openai", Rate: sdkTPM, Per: time.Minute, Burst: sdkTPM,
			Also: []throttle.Rate{{Rate: sdkRPM, Per: time.Minute, Burst: sdkRPM, Counts: throttle.CountsCalls}}},
		Cost:   func(*http.Request) int64 { return sdkPromptTokens + sdkMaxTokens },
		Settle: usageTokens,
	}
}

// sdkPromptTokens bounds the prompt tokens of the case's one message.
const sdkPromptTokens = 16

// usageTokens reads an OpenAI-style answer's usage.total_tokens.
func usageTokens(_ *http.Response, body []byte) (int64, bool) {
	var v struct {
		Usage struct {
			Total int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage.Total <= 0 {
		return 0, false
	}
	return v.Usage.Total, true
}

// runSDKOpenAI: openai-go's chat completions, its HTTP client's Transport
// sdkTransport on the case's Redis, sdkCallers goroutines calling for
// sdkSpan against the OpenAI fake; the tokens the fake served in that
// span against what it allows.
func runSDKOpenAI(ctx context.Context, c *caseEnv) ([]row, error) {
	fake, url, err := c.fake(ctx, "openai", "-rpm", fmt.Sprint(sdkRPM), "-tpm", fmt.Sprint(sdkTPM))
	if err != nil {
		return nil, err
	}
	defer fake.Kill()
	th, err := throttle.New(c.rc, nil)
	if err != nil {
		return nil, err
	}
	defer th.Close()
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-fake"),
		option.WithHTTPClient(&http.Client{Transport: sdkTransport(th)}))

	start := time.Now()
	calls := runCallers(ctx, sdkCallers, start.Add(sdkSpan), func(ctx context.Context) (int, error) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     "gpt-fake",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Summarise this order for the customer.")},
			MaxTokens: openai.Int(sdkMaxTokens),
		})
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return apiErr.StatusCode, err
		}
		return 0, err
	})
	arr, err := arrivals(ctx, url)
	if err != nil {
		return nil, err
	}
	s := measure(arr, start, sdkSpan)
	allowed := float64(sdkTokensInSpan())
	share := float64(s.tokens) / allowed
	fig := fmt.Sprintf("%.0f%% of the tokens allowed (%d of %.0f, %d calls); %d 429s at the API (%s); %s",
		100*share, s.tokens, allowed, s.ok, s.refused, s.reasons(), calls)
	notes := calls.notes()

	return []row{{name: c.name, target: "≥ 90% of the tokens the API allows, ≤ 2 429s", figure: fig, met: share >= 0.9 && s.refused <= 2, notes: notes}}, nil
}

// sdkTokensInSpan is the tokens the API allows in sdkSpan from a full
// bucket: the bucket and what refills in the span.
func sdkTokensInSpan() int64 { return int64(sdkTPM + sdkTPM*sdkSpan.Seconds()/60) }

// sdkCalls is what the SDK's callers saw: calls that succeeded, and the
// errors the SDK returned after its own retries, by status.
type sdkCalls struct {
	ok      int
	errs    map[int]int // by status; 0: not an API error (network, sluice's refusals)
	lastErr error       // the last error that was not an API error
}

func (c sdkCalls) String() string {
	s := fmt.Sprintf("the SDK returned %d answers", c.ok)
	for _, code := range []int{429, 503, 529} {
		if n := c.errs[code]; n > 0 {
			s += fmt.Sprintf(", %d %d errors", n, code)
		}
	}
	if n := c.errs[0]; n > 0 {
		s += fmt.Sprintf(", %d other errors", n)
	}
	return s + " (after its own retries)"
}

func (c sdkCalls) notes() []string {
	if c.lastErr == nil {
		return nil
	}
	return []string{fmt.Sprintf("the SDK's last error that was no API error: %v", c.lastErr)}
}

// runCallers runs callers goroutines calling call one after another
// until end, and counts what call returned (its status, 0 for none): an
// error after end, from the end cutting the call short, is not counted.
func runCallers(ctx context.Context, callers int, end time.Time, call func(context.Context) (int, error)) sdkCalls {
	rctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	out := sdkCalls{errs: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for rctx.Err() == nil {
				code, err := call(rctx)
				if rctx.Err() != nil {
					return
				}
				mu.Lock()
				switch {
				case err == nil:
					out.ok++
				default:
					out.errs[code]++
					if code == 0 {
						out.lastErr = err
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}
