package workercmd

import (
	"net"
	"sync"
	"time"
)

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

// limitListener accepts at most cap(sem) connections at once: Accept
// waits until an accepted one is closed, or the listener is.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free place, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

// Close closes the listener and wakes an Accept waiting for a place.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its place back once, when first closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
