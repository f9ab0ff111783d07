package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Serve is the body of an HTTP server child (a benchmark's fake API): it
// listens on a free loopback port, prints its URL as the first line of
// standard output, and serves h until SIGTERM, SIGINT or the end of life,
// whichever comes first. StartServer starts such a child.
func Serve(h http.Handler, life time.Duration) error {
	return ServeOn("127.0.0.1:0", h, life)
}

// ServeOn is Serve on the address addr, which must be a loopback one
// (127.0.0.1:0 for a free port).
func ServeOn(addr string, h http.Handler, life time.Duration) error {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("listen address %q: want a loopback address such as 127.0.0.1:0", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// StartServer starts a child whose main runs Serve, adds it to g, and
// returns it with the URL it printed, waiting up to limit for it.
func StartServer(ctx context.Context, g *Group, name, logPath string, limit time.Duration, bin string, args ...string) (*Child, string, error) {
	c, err := Start(name, logPath, bin, args...)
	if err != nil {
		return nil, "", err
	}
	g.Add(c)
	line, err := c.WaitLine(ctx, "http://127.0.0.1:", limit)
	if err != nil {
		return nil, "", err
	}
	return c, strings.TrimSpace(line), nil
}

// Stats reads a fake API's record (GET <url>/stats, JSON) into v.
func Stats(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/stats", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reading the API's record: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("reading the API's record: %w", err)
	}
	return nil
}

// Sleep waits d or until ctx is done, and says which.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
