package workercmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue/policy"
)

// startLimitedWorker runs a worker on miniredis with the given server
// limits until the test ends, and returns its address.
func startLimitedWorker(t *testing.T, lim serverLimits) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("queue:\n  name: slow\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	o := options{listen: "127.0.0.1:0", concurrency: 1, shutdown: time.Second, monitorReadOnly: true, limits: lim}
	w, err := newWorker(redistest.Mini(t), cfg, o, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return w.ln.Addr().String()
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

// TestLimitListener: with one place, a second connection is accepted only
// once the first is closed (closing it twice frees one place), and
// closing the listener wakes an Accept that waits for a place.
func TestLimitListener(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := netutil.LimitListener(tcp, 1)
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
	dial := func() {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	dial()
	first := <-accepted
	dial()
	dial()
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("a second connection was accepted while the first is open")
	case <-time.After(100 * time.Millisecond):
	}
	first.Close()
	first.Close() // frees one place, not two
	second := <-accepted
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("two places after closing one connection twice")
	case <-time.After(100 * time.Millisecond):
	}
	second.Close()
	third := <-accepted
	defer third.Close()
	// The loop now waits for a place; closing the listener ends it.
	ln.Close()
	if err := <-acceptErr; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}
