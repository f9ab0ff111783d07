package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stripe/stripe-go/v82"

	"github.com/sluicehq/sluice/bench/internal/vendorfake"
	"github.com/sluicehq/sluice/downstream"
	"github.com/sluicehq/sluice/throttle"
)

// The sdk-anthropic case's API: output tokens bind (about 125 a call
// against 8,000 a minute), 5% of calls are 529 overloaded_error.
const (
	anthRPM  = 300
	anthOTPM = 8_000
)

// runSDKAnthropic: anthropic-sdk-go's Messages over a downstream.Transport
// at the RPM (like sdkTransport, the one place a cost and settle go),
// 8 goroutines for 40 s; the output tokens served against what the API
// allows, its 429s, and its 529s (charged nothing by the API; each SDK
// retry of one passes through the Transport again).
func runSDKAnthropic(ctx context.Context, c *caseEnv) ([]row, error) {
	fake, url, err := c.fake(ctx, "anthropic", "-rpm", fmt.Sprint(anthRPM), "-tpm", "1000000", "-output-tpm", fmt.Sprint(anthOTPM), "-overload", "0.05")
	if err != nil {
		return nil, err
	}
	defer fake.Kill()
	th, err := throttle.New(c.rc, nil)
	if err != nil {
		return nil, err
	}
	defer th.Close()
	tr := &downstream.Transport{Throttle: th, Limit: throttle.Limit{Name: "anthropic", Rate: anthRPM, Per: time.Minute}}
	client := anthropic.NewClient(aoption.WithBaseURL(url+"/"), aoption.WithAPIKey("sk-ant-fake"), aoption.WithHTTPClient(&http.Client{Transport: tr}))
	start := time.Now()
	calls := runCallers(ctx, sdkCallers, start.Add(sdkSpan), func(ctx context.Context) (int, error) {
		_, err := client.Messages.New(ctx, anthropic.MessageNewParams{
			Model:     "claude-fake",
			MaxTokens: sdkMaxTokens,
			Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Summarise this order for the customer."))},
		})
		var apiErr *anthropic.Error
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
	allowed := anthOTPM + anthOTPM*sdkSpan.Seconds()/60
	share := float64(s.output) / allowed
	fig := fmt.Sprintf("%.0f%% of the output tokens allowed (%d of %.0f, %d calls); %d 429s, %d 529s at the API; %s",
		100*share, s.output, allowed, s.ok, s.refused, s.byReason["overloaded"], calls)
	return []row{{name: c.name, target: "≥ 90% of the tokens the API allows, ≤ 2 429s", figure: fig, met: share >= 0.9 && s.refused <= 2, notes: calls.notes()}}, nil
}

// runSDKStripe: stripe-go's charges over a downstream.Transport at 100/s
// (the rate only, as the stripe case's policy), 10 goroutines for 30 s
// against 3 in flight; stripe-go's own retries on (network errors,
// which sluice's refusals are to it, and 5xx; not 429s).
func runSDKStripe(ctx context.Context, c *caseEnv) ([]row, error) {
	const (
		span    = 30 * time.Second
		callers = 10
	)
	lat, _ := vendorfake.ParseLatency("20ms-60ms")
	fake, url, err := c.fake(ctx, "stripe", "-rate", "100", "-concurrency", "3", "-latency", lat.String())
	if err != nil {
		return nil, err
	}
	defer fake.Kill()
	th, err := throttle.New(c.rc, nil)
	if err != nil {
		return nil, err
	}
	defer th.Close()
	tr := &downstream.Transport{Throttle: th, Limit: throttle.Limit{Name: "stripe", Rate: 100}}
	backends := stripe.NewBackendsWithConfig(&stripe.BackendConfig{URL: stripe.String(url), HTTPClient: &http.Client{Transport: tr},
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})
	sc := stripe.NewClient("sk_test_fake", stripe.WithBackends(backends))
	start := time.Now()
	calls := runCallers(ctx, callers, start.Add(span), func(ctx context.Context) (int, error) {
		_, err := sc.V1Charges.Create(ctx, &stripe.ChargeCreateParams{Amount: stripe.Int64(100), Currency: stripe.String("usd"), Description: stripe.String("order 1")})
		var se *stripe.Error
		if errors.As(err, &se) {
			return se.HTTPStatusCode, err
		}
		return 0, err
	})
	arr, err := arrivals(ctx, url)
	if err != nil {
		return nil, err
	}
	s := measure(arr, start, span)
	allow := 3 * span.Seconds() / lat.Mean().Seconds()
	share := float64(s.ok) / allow
	fig := fmt.Sprintf("%.0f%% (%d calls of %.0f); %d 429s after 5 s (%d in all: %s); %s", 100*share, s.ok, allow, s.lateRefused, s.refused, s.reasons(), calls)
	return []row{{name: c.name, target: "≥ 80% of what 3 in flight allow, ≤ 5 429s after the first 5 s", figure: fig,
		met: share >= 0.8 && s.lateRefused <= 5, notes: calls.notes()}}, nil
}
