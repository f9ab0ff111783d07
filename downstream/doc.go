// Package downstream is the third-party side of sluice: Transport, an
// http.RoundTripper that gives any HTTP client, a vendor SDK's included,
// the whole throttle, and ParseFeedback, which reads what a response
// says of the caller's limits in each vendor's own words.
//
// Before each request Transport books the request's cost (Transport.Cost:
// 1, or its estimated tokens) on every bucket of the key at once and
// waits for the slot, fleet-wide; after the response it settles the
// booking to the real cost (Transport.Settle), makes the buckets follow
// the quota the API reports (never holding more than it says is left,
// less Transport.Headroom), and pauses the key as the answer asks: a
// refusal for the rate for its Retry-After (or, for a reset that means
// "full again", the time until the next unit), a concurrency refusal
// briefly while this process sends fewer calls at once, an overload
// without charging the quota or slowing the pace. docs/throttle.md
// (Vendor feedback) has the table of each vendor's fields.
//
// # SDKs
//
// Give the SDK an *http.Client whose Transport is a Transport:
// option.WithHTTPClient(c) for openai-go and anthropic-sdk-go, the
// HTTPClient of stripe-go's stripe.BackendConfig, github.NewClient(c). Every request
// the SDK sends takes its own slot, its retries too, so none can skip
// the bucket or a pause. sluice's own refusals (a slot further away than
// Limit.MaxWait, every concurrency lease held, Redis unreachable) come
// back as a 429 with Retry-After, x-should-retry: false (openai-go,
// anthropic-sdk-go) and Stripe-Should-Retry: false (stripe-go), so that
// the SDK gives up at once rather than retrying into the same refusal;
// OwnRefusal returns the error it stands for. An SDK's own retries of the
// API's refusals then wait for their slots like any request: leave them
// on, or set the SDK's max retries to 0 and let the queue retry the job.
//
// go-github keeps a rate limiter of its own: once GitHub says a limit is
// spent it refuses every call itself until the reset, without sending
// it, so the calls never reach the Transport that would have made them
// wait, fleet-wide, for that reset. Switch it off, passing each call a
// context with github.BypassRateLimitCheck set to true, and let the
// Transport pace the calls: it reads GitHub's epoch reset, its
// secondary limits (Retry-After, or a minute when a 429 says nothing)
// and X-RateLimit-Resource. With go-github's limiter left on,
// the two combine only in that go-github fails the calls sluice would
// have delayed.
//
// # The queue's worker
//
// A handler that already holds its job's slot (the worker books it
// before the handler runs) hands it to the Transport with
// WithReservation: the call's first request uses it, so a call is booked
// once; its redirects and retries book their own. The built-in HTTP job
// (package queue/httpjob) does so.
//
// The package does not depend on the queue: the queue's built-in job type
// for outbound HTTP calls is in package queue/httpjob, and a fake
// quota-enforcing API for tests is in package downstream/downstreamtest.
package downstream
