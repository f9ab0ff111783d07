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
// The package does not depend on the queue: the queue's built-in job type
// for outbound HTTP calls is in package queue/httpjob, and a fake
// quota-enforcing API for tests is in package downstream/downstreamtest.
package downstream
