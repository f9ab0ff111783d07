package worker

import (
	"container/list"
	"net"
	"net/http"
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
	// MaxConns is how many connections the server holds at once. When
	// a new one arrives at the limit, the oldest connection that has not
	// sent a whole request header (a slow client, or an idle keep-alive
	// one) is closed to make room; only when every connection is in a
	// request does the new one wait (connLimiter).
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

// connLimiter is a listener that holds at most max connections without
// letting slow clients starve the rest. A listener that stops accepting
// at its limit (netutil.LimitListener) lets a few hundred connections
// that trickle their headers (slowloris) keep every other client, an
// orchestrator's /healthz among them, in the kernel's backlog until the
// header timeout cuts them. connLimiter instead makes room for each new
// connection by closing the connection that has waited longest without a
// whole request header (new, or idle between keep-alive requests): a
// client that sends its header at once is served, however many slow
// ones there are. Connections in a request are never closed for room;
// when all max are in one, the next connection waits until one is done.
// The server's ConnState must be the limiter's connState, which tells it
// which connections are in a request.
type connLimiter struct {
	net.Listener
	max int

	mu      sync.Mutex
	open    int       // accepted and not yet closed
	waiting list.List // *limitedConn without a whole request header, oldest first
	room    chan struct{}
	done    chan struct{}
	stopped sync.Once
}

// newConnLimiter returns ln limited to n connections (at least 1).
func newConnLimiter(ln net.Listener, n int) *connLimiter {
	return &connLimiter{Listener: ln, max: max(n, 1), room: make(chan struct{}, 1), done: make(chan struct{})}
}

// limitedConn is one connection of a connLimiter.
type limitedConn struct {
	net.Conn
	l       *connLimiter
	elem    *list.Element // in l.waiting, or nil; guarded by l.mu
	release sync.Once
}

// Accept waits for the next connection, then makes room for it.
func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if l.open < l.max {
			lc := &limitedConn{Conn: c, l: l}
			l.open++
			lc.elem = l.waiting.PushBack(lc)
			l.mu.Unlock()
			return lc, nil
		}
		var oldest *limitedConn
		if e := l.waiting.Front(); e != nil {
			oldest = e.Value.(*limitedConn)
		}
		l.mu.Unlock()
		if oldest != nil {
			oldest.Close()
			continue
		}
		select { // every connection is in a request
		case <-l.room:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and wakes an Accept that waits for room.
func (l *connLimiter) Close() error {
	l.stopped.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// signal wakes an Accept that waits for room.
func (l *connLimiter) signal() {
	select {
	case l.room <- struct{}{}:
	default:
	}
}

// connState is the http.Server's ConnState: a connection that has read
// a whole request header leaves the waiting list, one that is idle again
// joins its end, and a hijacked one is no longer the server's to close.
func (l *connLimiter) connState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	switch {
	case (s == http.StateActive || s == http.StateHijacked || s == http.StateClosed) && lc.elem != nil:
		l.waiting.Remove(lc.elem)
		lc.elem = nil
	case s == http.StateIdle && lc.elem == nil:
		lc.elem = l.waiting.PushBack(lc)
	}
	l.mu.Unlock()
	if s == http.StateIdle {
		l.signal()
	}
}

// Close closes the connection and frees its place, once.
func (c *limitedConn) Close() error {
	c.release.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if c.elem != nil {
			c.l.waiting.Remove(c.elem)
			c.elem = nil
		}
		c.l.mu.Unlock()
		c.l.signal()
	})
	return c.Conn.Close()
}
