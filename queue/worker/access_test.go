package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/queue"
)

// TestOperatorTokenAndKeys: with -operator-token the page, /metrics and
// /monitoring/ answer 401 without the token and serve with it (bearer or
// basic), /healthz stays open; with -enqueue-keys POST /enqueue takes a
// key's tenant only. The start says so in one line.
func TestOperatorTokenAndKeys(t *testing.T) {
	m := miniredis.RunT(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: ops\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef-operator"
	addr, logs := runWorker(t, policy, "-redis", "redis://"+m.Addr()+"/0", "-enqueue-keys", "-operator-token", token)
	if !strings.Contains(logs.String(), "takes callers with an API key") {
		t.Errorf("no line about the keys at start:\n%s", logs)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	p, err := queue.NewProducer(client, &queue.Config{Queue: "ops", Bound: 10})
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := p.Keys().Add(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, auth, user, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		switch {
		case user != "":
			req.SetBasicAuth(user, auth)
		case auth != "":
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct{ Reason string }
		if resp.StatusCode/100 != 2 {
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
				t.Errorf("%s %s: %d without a JSON body: %v", method, path, resp.StatusCode, err)
			}
		}
		return resp.StatusCode, r.Reason
	}
	for _, c := range []struct {
		method, path, auth, user, body string
		code                           int
		reason                         string
	}{
		{"GET", "/metrics", "", "", "", 401, "missing_token"},
		{"GET", "/metrics", "Bearer " + token + "x", "", "", 401, "bad_token"},
		{"GET", "/metrics", "Bearer " + token[:len(token)-1], "", "", 401, "bad_token"},
		{"GET", "/metrics", "Token " + token, "", "", 401, "bad_token"},
		{"GET", "/metrics", "Bearer " + token, "", "", 200, ""},
		{"GET", "/metrics", token, "ops", "", 200, ""},
		{"GET", "/", "", "", "", 401, "missing_token"},
		{"GET", "/", "Bearer " + token, "", "", 200, ""},
		{"GET", "/monitoring/", "", "", "", 401, "missing_token"},
		{"GET", "/monitoring/api/queues", "", "", "", 401, "missing_token"},
		{"GET", "/monitoring/api/queues", token, "anyone", "", 200, ""},
		{"GET", "/healthz", "", "", "", 200, ""},
		// The operator token is no API key.
		{"POST", "/enqueue", "Bearer " + token, "", `{"tenant":"acme","type":"x"}`, 401, "bad_key"},
		{"POST", "/enqueue", "", "", `{"tenant":"acme","type":"x"}`, 401, "missing_key"},
		{"POST", "/enqueue", "Bearer " + key, "", `{"tenant":"other","type":"x","run_in":"1h"}`, 403, "forbidden_tenant"},
		// Due in an hour, so that the worker's quick hand-over cannot
		// take it before the count below.
		{"POST", "/enqueue", "Bearer " + key, "", `{"type":"x","run_in":"1h"}`, 202, ""},
	} {
		if code, reason := do(c.method, c.path, c.auth, c.user, c.body); code != c.code || reason != c.reason {
			t.Errorf("%s %s %q: %d %q, want %d %q", c.method, c.path, c.auth, code, reason, c.code, c.reason)
		}
	}
	st, err := p.Stats(context.Background())
	if err != nil || st.Depth != 1 || st.Later != 1 {
		t.Errorf("depth %d, later %d (%v), want the 1 job accepted", st.Depth, st.Later, err)
	}
}

// TestOpenByDefault: without keys and a token the endpoints are open as
// before, and the start says so.
func TestOpenByDefault(t *testing.T) {
	m := miniredis.RunT(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: open\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, logs := runWorker(t, policy, "-redis", "redis://"+m.Addr()+"/0")
	if !strings.Contains(logs.String(), "takes any tenant's jobs from whoever reaches it (no -enqueue-keys); it listens on loopback only") {
		t.Errorf("no line about the open endpoint at start:\n%s", logs)
	}
	for _, path := range []string{"/metrics", "/", "/monitoring/"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d, want 200", path, resp.StatusCode)
		}
	}
	resp, err := http.Post("http://"+addr+"/enqueue", "application/json", strings.NewReader(`{"tenant":"any","type":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Errorf("POST /enqueue without a key: %d, want 202", resp.StatusCode)
	}
}

// TestOperatorTokenTooShort: a short token is refused at New.
func TestOperatorTokenTooShort(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("queue:\n  name: short\n  bound: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := flagConfig(t, "-policy", policy, "-redis", "redis://127.0.0.1:1/0", "-operator-token", "short")
	if _, err := New(cfg); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("New with a 5-byte token: %v", err)
	}
}
