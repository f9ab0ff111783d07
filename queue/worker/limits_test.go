package worker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// startLimitedWorker runs a worker on miniredis with the given server
// limits until the test ends, and returns its address.
func startLimitedWorker(t *testing.T, lim serverLimits) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("queue:\n  name: slow\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(&Config{PolicyFile: file, Redis: redistest.Mini(t), Listener: ln, Concurrency: 1, ShutdownTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.limits = lim
	runUntilCleanup(t, w, new(strings.Builder))
	return ln.Addr().String()
}

// closedWithin reads c until the server closes it and reports how long
// that took, failing the test if it is still open after limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %v", limit)
	}
	return time.Since(start)
}

// TestSlowClientsAreCut: a request body trickled one byte every 50 ms is
// cut at the read timeout, and a keep-alive connection left idle is
// closed at the idle timeout (issue 19, finding 9; short limits here,
// 30 s and 2 min in the worker).
func TestSlowClientsAreCut(t *testing.T) {
	lim := serverLimits{ReadHeader: 300 * time.Millisecond, Read: 500 * time.Millisecond, Write: time.Second, Idle: 500 * time.Millisecond, MaxConns: 8}
	addr := startLimitedWorker(t, lim)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /enqueue HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", addr)
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	// 1,000 bytes at 20 a second would take 50 s.
	took := closedWithin(t, c, 5*time.Second)
	close(stop)
	<-trickled
	t.Logf("trickled body cut after %v (read timeout %v)", took, lim.Read)

	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took = closedWithin(t, c2, 5*time.Second)
	t.Logf("idle keep-alive connection closed after %v (idle timeout %v)", took, lim.Idle)
}

// TestConnLimiter: with two places, a third connection closes the
// oldest that has no whole request header; when both places are in a
// request, the next connection waits until one is idle again (and then
// closes that one) or is closed (closing it twice frees one place);
// closing the listener wakes an Accept that waits.
func TestConnLimiter(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newConnLimiter(tcp, 2)
	accepted := make(chan net.Conn)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		return c
	}
	closedByServer := func(c net.Conn, what string) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("%s: read %v, want EOF (closed for room)", what, err)
		}
	}
	none := func(what string) {
		t.Helper()
		select {
		case c := <-accepted:
			c.Close()
			t.Fatal(what)
		case <-time.After(100 * time.Millisecond):
		}
	}
	a := dial()
	first := <-accepted
	dial()
	second := <-accepted
	dial()
	third := <-accepted
	closedByServer(a, "the oldest connection without a header")
	first.Close()
	// Both places are in a request: the next waits.
	ln.connState(second, http.StateActive)
	ln.connState(third, http.StateActive)
	dial()
	none("a connection was accepted while both places are in a request")
	ln.connState(second, http.StateIdle)
	fourth := <-accepted
	closedByServer(clients[1], "the idle keep-alive connection")
	second.Close()
	ln.connState(fourth, http.StateActive)
	dial()
	none("a connection was accepted while both places are in a request")
	third.Close()
	third.Close() // frees one place, not two
	fifth := <-accepted
	defer fifth.Close()
	ln.connState(fifth, http.StateActive)
	dial()
	none("two places after closing one connection twice")
	// Accept now waits for room; closing the listener ends it.
	ln.Close()
	if err := <-acceptErr; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	fourth.Close()
}

// TestHealthzUnderSlowloris: 300 connections that never finish their
// request header (each one closed is opened again at once, as an
// attacker would) leave /healthz answerable. The server's place limit
// was a listener that stopped accepting at 256 connections: the 257th,
// /healthz among them, waited in the kernel's backlog until a slow
// connection's header timeout (10 s) cut it. Each /healthz here must
// answer within 2 s (generous: it takes milliseconds), with the worker's
// default limits.
func TestHealthzUnderSlowloris(t *testing.T) {
	addr := startLimitedWorker(t, defaultLimits)
	const slow = 300
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var opened atomic.Int64
	for range slow {
		wg.Go(func() {
			for {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
						continue
					}
				}
				opened.Add(1)
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Slow: ", addr)
				closed := make(chan struct{})
				go func() { // the server closing it, or the test ending
					io.Copy(io.Discard, c)
					close(closed)
				}()
				select {
				case <-stop:
					c.Close()
					<-closed
					return
				case <-closed:
					c.Close()
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitUntil(t, 10*time.Second, "the slow connections to open", func() bool { return opened.Load() >= slow })
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		start := time.Now()
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz #%d with %d slow connections: %v (after %v)", i, slow, err, time.Since(start))
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz #%d: %d", i, resp.StatusCode)
		}
		t.Logf("GET /healthz #%d with %d slow connections: %v", i, slow, time.Since(start).Round(time.Millisecond))
	}
}
