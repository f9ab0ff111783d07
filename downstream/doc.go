// Package downstream is the third-party side of sluice: Transport, an
// http.RoundTripper that takes a fleet-wide throttle slot before each
// request and, when a response asks for a pause (429, 503, Retry-After,
// a spent quota in the RateLimit or vendor headers that ParseFeedback
// reads), pauses the key for the whole fleet.
//
// The package does not depend on the queue: the queue's built-in job type
// for outbound HTTP calls is in package queue/httpjob, and a fake
// quota-enforcing API for tests is in package downstream/downstreamtest.
package downstream
