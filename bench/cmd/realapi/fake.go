package main

import (
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/vendorfake"
)

// fakeArg is the first argument that makes this binary a fake API.
const fakeArg = "fake"

// runFake is `realapi fake -vendor X -listen 127.0.0.1:0 ...`: one fake
// API in this process, its URL the first line of standard output.
func runFake(args []string) error {
	fs := flag.NewFlagSet("realapi fake", flag.ContinueOnError)
	vendor := fs.String("vendor", "", "openai, anthropic, shopify, stripe or hooks")
	listen := fs.String("listen", "127.0.0.1:0", "the loopback address to listen on")
	life := fs.Duration("life", 30*time.Minute, "stop after this long whatever happens")
	latency := fs.String("latency", "", "answer times: 40ms, 20ms-60ms, or either with ,1%:2s (default: the vendor's)")
	seed := fs.Uint64("seed", 1, "seed of the latencies and costs")
	var llm vendorfake.LLMConfig
	fs.Int64Var(&llm.RPM, "rpm", 60, "openai, anthropic: requests a minute")
	fs.Int64Var(&llm.TPM, "tpm", 1_000_000, "openai: tokens a minute; anthropic: input tokens a minute")
	fs.Int64Var(&llm.OutputTPM, "output-tpm", 0, "anthropic: output tokens a minute (0: none)")
	fs.Int64Var(&llm.StartRequests, "start-requests", -1, "openai, anthropic: requests left at the start (-1: full)")
	fs.Int64Var(&llm.StartTokens, "start-tokens", -1, "openai, anthropic: tokens left at the start (-1: full)")
	fs.Float64Var(&llm.Overload, "overload", 0, "openai, anthropic: share of calls answered 503 / 529 overloaded")
	fs.BoolVar(&llm.RetryAfter, "retry-after", false, "openai: send retry-after and retry-after-ms on 429s")
	var shop vendorfake.ShopifyConfig
	fs.Float64Var(&shop.Rate, "leak", 2, "shopify: the bucket's leak, calls a second")
	fs.IntVar(&shop.Bucket, "bucket", 40, "shopify: the bucket's size")
	fs.IntVar(&shop.Stores, "stores", 100, "shopify: stores the other client calls (store-0 ...)")
	fs.Float64Var(&shop.OtherShare, "other-share", 0.5, "shopify: share of each store's rate the other client takes (0: none)")
	fs.IntVar(&shop.OtherBurst, "other-burst", 10, "shopify: the other client's calls per burst")
	var stripe vendorfake.StripeConfig
	fs.Int64Var(&stripe.Rate, "rate", 100, "stripe: requests a second")
	fs.IntVar(&stripe.Concurrency, "concurrency", 3, "stripe: requests in flight at once")
	var hooks vendorfake.HooksConfig
	fs.IntVar(&hooks.Healthy, "healthy", 18, "hooks: healthy receivers")
	fs.IntVar(&hooks.Slow, "slow", 1, "hooks: slow receivers")
	fs.IntVar(&hooks.Down, "down", 1, "hooks: receivers that refuse connections")
	slow := fs.String("slow-latency", "5s", "hooks: a slow receiver's answer time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	defaults := map[string]string{"openai": "200ms-800ms", "anthropic": "300ms-1s", "shopify": "50ms-150ms", "stripe": "20ms-60ms", "hooks": "5ms-40ms"}
	if _, ok := defaults[*vendor]; !ok {
		return fmt.Errorf("-vendor %q: want openai, anthropic, shopify, stripe or hooks", *vendor)
	}
	if *latency == "" {
		*latency = defaults[*vendor]
	}
	lat, err := vendorfake.ParseLatency(*latency)
	if err != nil {
		return err
	}
	now := time.Now()
	var h http.Handler
	var stop []func()
	switch *vendor {
	case "openai":
		llm.Latency, llm.Seed = lat, *seed
		h = vendorfake.NewOpenAI(llm, now)
	case "anthropic":
		llm.Latency, llm.Seed = lat, *seed
		h = vendorfake.NewAnthropic(llm, now)
	case "shopify":
		shop.Latency, shop.Seed = lat, *seed
		s := vendorfake.NewShopify(shop, now)
		done := make(chan struct{})
		go s.RunOther(done)
		stop = append(stop, func() { close(done) })
		h = s
	case "stripe":
		stripe.Latency, stripe.Seed = lat, *seed
		h = vendorfake.NewStripe(stripe, now)
	case "hooks":
		hooks.Latency, hooks.Seed = lat, *seed
		if hooks.SlowLatency, err = vendorfake.ParseLatency(*slow); err != nil {
			return err
		}
		hk := vendorfake.NewHooks(hooks)
		if _, err := hk.Listen(); err != nil {
			return err
		}
		stop = append(stop, func() { _ = hk.Close() })
		h = hk
	}
	defer func() {
		for _, f := range stop {
			f()
		}
	}()
	return proc.ServeOn(*listen, h, *life)
}
