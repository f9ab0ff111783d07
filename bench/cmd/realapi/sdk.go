package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
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
// Transport. downstream.Transport books one unit a request today, with no
// option for a request's cost or a settle from its response, so its Limit
// is the API's requests a minute and the tokens go unbooked. Once it takes
// a cost function and a settle (the tokens a request may use, settled to
// the response's usage.total_tokens), they go here, with the Limit at the
// tokens a minute and the requests a minute as an Also counting calls:
// nothing else in this file changes.
func sdkTransport(th *throttle.Throttle) http.RoundTripper {
	return &downstream.Transport{Throttle: th, Limit: throttle.Limit{Name: "openai", Rate: sdkRPM, Per: time.Minute}}
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
	rctx, cancel := context.WithDeadline(ctx, start.Add(sdkSpan))
	defer cancel()
	var done, limited, other atomic.Int64
	var mu sync.Mutex
	var lastErr error
	var wg sync.WaitGroup
	for range sdkCallers {
		wg.Go(func() {
			for rctx.Err() == nil {
				_, err := client.Chat.Completions.New(rctx, openai.ChatCompletionNewParams{
					Model:     "gpt-fake",
					Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Summarise this order for the customer.")},
					MaxTokens: openai.Int(sdkMaxTokens),
				})
				var apiErr *openai.Error
				switch {
				case err == nil:
					done.Add(1)
				case rctx.Err() != nil:
				case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
					mu.Lock()
					lastErr = err
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	arr, err := arrivals(ctx, url)
	if err != nil {
		return nil, err
	}
	s := measure(arr, start, sdkSpan)
	allowed := float64(sdkTokensInSpan())
	share := float64(s.tokens) / allowed
	fig := fmt.Sprintf("%.0f%% of the tokens allowed (%d of %.0f, %d calls); %d 429s at the API (%s); the SDK saw %d 429 errors after its retries, %d other errors",
		100*share, s.tokens, allowed, s.ok, s.refused, s.reasons(), limited.Load(), other.Load())
	var notes []string
	if lastErr != nil {
		notes = append(notes, fmt.Sprintf("the last other error: %v", lastErr))
	}
	notes = append(notes, "downstream.Transport has no cost or settle option in this build: it books 1 unit a request at the RPM (sdkTransport in cmd/realapi/sdk.go is where a cost function plugs in)")
	return []row{{name: c.name, target: "≥ 90% of the tokens the API allows, ≤ 2 429s", figure: fig, met: share >= 0.9 && s.refused <= 2, notes: notes}}, nil
}

// sdkTokensInSpan is the tokens the API allows in sdkSpan from a full
// bucket: the bucket and what refills in the span.
func sdkTokensInSpan() int64 { return int64(sdkTPM + sdkTPM*sdkSpan.Seconds()/60) }
