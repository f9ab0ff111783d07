// Package downstream is the third-party side of sluice.
//
// Transport is an http.RoundTripper that takes a throttle slot before each
// request (fleet-wide, through package throttle) and reads what the
// downstream says of its limits after each response: 429 and 503,
// Retry-After (seconds or an HTTP date), the IETF RateLimit /
// RateLimit-Policy fields in their draft forms, and the common
// X-RateLimit-*, OpenAI, Anthropic and Shopify headers (ParseFeedback). A
// response that asks for a pause pauses the key for the whole fleet.
//
// HTTPJob is the queue's built-in job type for outbound HTTP calls, which
// makes the worker useful with no Go code of the user's.
//
// FakeServer is a third-party API for tests, benchmarks and the demo: it
// enforces a quota exactly, answers 429 with Retry-After above it, can be
// told to misbehave, and records the arrival time of every call.
package downstream
