package workercmd

import "time"

// serverLimits bound what slow or many clients can hold of the worker's
// HTTP server.
type serverLimits struct {
	// ReadHeader and Read bound the reading of a request's header and
	// of the whole request (a body trickled a byte at a time is cut).
	ReadHeader, Read time.Duration
	// Write bounds the writing of a response, from the end of the
	// request's header: asynqmon's answers and /metrics take well under
	// a second.
	Write time.Duration
	// Idle closes a keep-alive connection that sends no next request.
	Idle time.Duration
	// MaxConns is how many connections the server holds at once; the
	// next waits in the kernel's backlog until one closes.
	MaxConns int
}

// defaultLimits are the worker's server limits.
var defaultLimits = serverLimits{
	ReadHeader: 10 * time.Second,
	Read:       30 * time.Second,
	Write:      60 * time.Second,
	Idle:       2 * time.Minute,
	MaxConns:   256,
}
