package worker

import (
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// TestHostGuard: which Host and Origin values the worker answers to, for
// a loopback listener, one on every address and one on another address,
// with and without -allowed-hosts (issue 19, finding 3).
func TestHostGuard(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9090}
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 9090}
	lan := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9090}
	extra, err := allowedHosts([]string{" Sluice.Internal ", "proxy.example:8443", "[fd00::5]", ""})
	if err != nil {
		t.Fatal(err)
	}
	guards := map[string]*hostGuard{
		"loopback":       newHostGuard("127.0.0.1:9090", loop, nil, ok),
		"loopback+extra": newHostGuard("127.0.0.1:9090", loop, extra, ok),
		"any":            newHostGuard(":9090", any4, nil, ok),
		"lan":            newHostGuard("10.1.2.3:9090", lan, nil, ok),
		"named":          newHostGuard("worker-1:9090", lan, nil, ok),
	}
	for _, c := range []struct {
		guard, host, origin string // origin "-": none
		code                int
	}{
		{"loopback", "127.0.0.1:9090", "-", 200},
		{"loopback", "localhost:9090", "-", 200},
		{"loopback", "LocalHost:9090", "-", 200},
		{"loopback", "[::1]:9090", "-", 200},
		{"loopback", "localhost:9091", "-", 421},
		{"loopback", "localhost", "-", 421}, // port 80
		{"loopback", "rebind.attacker.example:9090", "-", 421},
		{"loopback", "127.0.0.1.nip.io:9090", "-", 421},
		{"loopback", "", "-", 421},
		{"loopback", "sluice.internal:9090", "-", 421},
		{"loopback+extra", "sluice.internal", "-", 200},
		{"loopback+extra", "sluice.internal:9090", "-", 200},
		{"loopback+extra", "proxy.example:8443", "-", 200},
		{"loopback+extra", "proxy.example", "-", 421},
		{"loopback+extra", "[fd00::5]:1", "-", 200},
		{"loopback+extra", "localhost:9090", "-", 200},
		{"any", "localhost:9090", "-", 200},
		{"any", "0.0.0.0:9090", "-", 200},
		{"any", "10.1.2.3:9090", "-", 421},
		{"lan", "10.1.2.3:9090", "-", 200},
		{"lan", "localhost:9090", "-", 421},
		{"named", "worker-1:9090", "-", 200},
		{"named", "10.1.2.3:9090", "-", 200},
		// Origin: absent, or one of the worker's own.
		{"loopback", "127.0.0.1:9090", "http://127.0.0.1:9090", 200},
		{"loopback", "127.0.0.1:9090", "http://localhost:9090", 200},
		{"loopback", "127.0.0.1:9090", "https://attacker.example", 403},
		{"loopback", "127.0.0.1:9090", "http://attacker.example:9090", 403},
		{"loopback", "127.0.0.1:9090", "http://127.0.0.1:9091", 403},
		{"loopback", "127.0.0.1:9090", "http://127.0.0.1", 403},
		{"loopback", "127.0.0.1:9090", "null", 403},
		{"loopback", "127.0.0.1:9090", "", 403},
		{"loopback", "127.0.0.1:9090", "file://", 403},
		{"loopback", "127.0.0.1:9090", "http://u@127.0.0.1:9090", 403},
		{"loopback", "127.0.0.1:9090", "http://127.0.0.1:9090/x", 403},
		{"loopback", "127.0.0.1:9090", "HTTP://LOCALHOST:9090", 200},
		{"loopback+extra", "sluice.internal", "https://sluice.internal", 200},
		{"loopback+extra", "sluice.internal", "http://sluice.internal:8080", 200},
		{"loopback+extra", "proxy.example:8443", "https://proxy.example:8443", 200},
		{"loopback+extra", "proxy.example:8443", "https://proxy.example", 403},
	} {
		r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		r.Host = c.host
		if c.origin != "-" {
			r.Header.Set("Origin", c.origin)
		}
		rec := httptest.NewRecorder()
		guards[c.guard].ServeHTTP(rec, r)
		if rec.Code != c.code {
			t.Errorf("%s listener, Host %q, Origin %q: %d, want %d", c.guard, c.host, c.origin, rec.Code, c.code)
		}
	}
	for _, bad := range []string{"http://a.com", "a.com/x", "u@a.com", "a.com:"} {
		if _, err := allowedHosts([]string{bad}); err == nil {
			t.Errorf("AllowedHosts %q accepted", bad)
		}
		if _, err := New(&Config{PolicyFile: plainPolicy(t), RedisURL: "embedded", AllowedHosts: []string{bad}}); !errors.Is(err, ErrConfig) {
			t.Errorf("New with AllowedHosts %q: %v, want ErrConfig", bad, err)
		}
	}
	env := map[string]string{"SLUICE_ALLOWED_HOSTS": "a.example, B.example:1"}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	f := NewFlags(fs, func(k string) string { return env[k] })
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config()
	if err != nil || strings.Join(cfg.AllowedHosts, " ") != "a.example b.example:1" {
		t.Errorf("SLUICE_ALLOWED_HOSTS: %v", err)
	}
}

// TestWorkerRefusesWebPages: the running worker refuses, on each of its
// endpoints, what a web page in a browser can send: a text/plain POST,
// a foreign Origin, a foreign Host (DNS rebinding); and it answers to the
// names of -allowed-hosts (issue 19, finding 3). (queue's
// TestHTTPEndpointWantsJSON checks that a refused POST enqueues nothing.)
func TestWorkerRefusesWebPages(t *testing.T) {
	m := miniredis.RunT(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: web\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _ := runWorker(t, policy, "-redis", "redis://"+m.Addr()+"/0", "-allowed-hosts", "sluice.test")
	_, port, _ := net.SplitHostPort(addr)
	do := func(method, path, host, origin, contentType string) int {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"tenant":"a","type":"x"}`)
		}
		req, err := http.NewRequest(method, "http://"+addr+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const json = "application/json"
	rebind := "rebind.attacker.example:" + port
	for _, c := range []struct {
		method, path, host, origin, contentType string
		code                                    int
	}{
		// The request: a browser's no-cors POST after DNS rebinding.
		{"POST", "/enqueue", rebind, "https://attacker.example", "text/plain", 421},
		{"POST", "/enqueue", "", "", "text/plain", 415},
		{"POST", "/enqueue", "", "", "application/x-www-form-urlencoded", 415},
		{"POST", "/enqueue", "", "https://attacker.example", json, 403},
		{"POST", "/enqueue", rebind, "", json, 421},
		{"GET", "/monitoring/api/queues", rebind, "", "", 421},
		{"GET", "/monitoring/", rebind, "", "", 421},
		{"GET", "/monitoring/api/queues", "", "https://attacker.example", "", 403},
		{"GET", "/metrics", rebind, "", "", 421},
		{"GET", "/healthz", rebind, "", "", 421},
		{"GET", "/healthz", "", "null", "", 403},
		// What the worker answers to.
		{"GET", "/healthz", "localhost:" + port, "", "", 200},
		{"GET", "/healthz", "sluice.test", "", "", 200},
		{"GET", "/monitoring/api/queues", "sluice.test:" + port, "http://sluice.test:" + port, "", 200},
		{"GET", "/metrics", "", "", "", 200},
		{"POST", "/enqueue", "", "", json, 202},
		{"POST", "/enqueue", "localhost:" + port, "http://localhost:" + port, json, 202},
	} {
		if got := do(c.method, c.path, c.host, c.origin, c.contentType); got != c.code {
			t.Errorf("%s %s Host %q Origin %q Content-Type %q: %d, want %d", c.method, c.path, c.host, c.origin, c.contentType, got, c.code)
		}
	}
}
