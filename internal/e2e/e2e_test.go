// Package e2e runs sluice as its users do: worker and enqueue binaries as
// separate OS processes against a real redis-server, a fake downstream
// enforcing a quota, jobs from the CLI and the HTTP endpoint.
package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/downstream/downstreamtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// build compiles the module's commands once per test binary.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func binaries(t *testing.T) (worker, enqueue string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "sluice-e2e-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir, "github.com/sluicehq/sluice/cmd/worker", "github.com/sluicehq/sluice/cmd/enqueue")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "worker"), filepath.Join(binDir, "enqueue")
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestEndToEnd: three worker processes drain jobs enqueued by the CLI and
// by the HTTP endpoint for several tenants. Every accepted job reaches the
// downstream exactly as often as it was accepted, the downstream answers
// no 429, the pace stays at the quota, and a tenant over its admission
// policy is refused with the right exit code and headers.
func TestEndToEnd(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	t0 := time.Now()
	worker, enqueue := binaries(t)
	t.Logf("built the commands in %v", time.Since(t0))
	// The downstream refuses a call that comes more than 3 intervals
	// (120ms) early. Calls leave the fleet on their slots, but a process
	// the machine's scheduler wakes late sends late and the next one on
	// time; on two shared cores running this test's six processes that
	// jitter must stay inside the downstream's tolerance.
	const quota = 25
	fake := downstreamtest.NewServer(downstreamtest.Config{Rate: quota, Tolerance: 3})
	defer fake.Close()
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte(fmt.Sprintf(`queue:
  name: e2e
  bound: 1000
  prefetch: 16
downstreams:
  api:
    base_url: %s/api/
    rate: %d
    per: 1s
    max_wait: 2s
tenants:
  limited:
    algorithm: fixed_window
    limit: 3
    period: 1h
`, fake.URL(), quota)), 0o644)
	redisURL := "redis://" + srv.Addr() + "/0"

	var workers []*exec.Cmd
	var httpAddr string
	for i := 0; i < 3; i++ {
		addr := freeAddr(t)
		if i == 0 {
			httpAddr = addr
		}
		cmd := exec.Command(worker, "-policy", policy, "-redis", redisURL, "-listen", addr, "-concurrency", "4")
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, cmd)
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if t.Failed() {
				t.Logf("worker %d:\n%s", i, logs.String())
			}
		})
	}
	// Wait for the first worker's endpoint.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker not healthy: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// 60 jobs from the CLI, as JSON lines, for three tenants.
	var lines strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&lines, `{"tenant":"t%d","type":"sluice.http","downstream":"api","payload":{"method":"POST","url":"%s/api/orders","body":"%d"}}`+"\n", i%3, fake.URL(), i)
	}
	cli := exec.Command(enqueue, "-policy", policy, "-redis", redisURL, "-f", "-", "-q")
	cli.Stdin = strings.NewReader(lines.String())
	out, err := cli.CombinedOutput()
	if err != nil {
		t.Fatalf("enqueue -f: %v\n%s", err, out)
	}
	accepted := 60

	// 40 jobs through the HTTP endpoint.
	for i := 0; i < 40; i++ {
		body := fmt.Sprintf(`{"tenant":"h%d","type":"sluice.http","downstream":"api","payload":{"url":"%s/api/items/%d"}}`, i%4, fake.URL(), i)
		resp, err := http.Post("http://"+httpAddr+"/enqueue", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /enqueue: %d", resp.StatusCode)
		}
		accepted++
	}

	// The limited tenant: 3 admitted, then refused by the CLI (exit 3)
	// and by the endpoint (429 with headers).
	for i := 0; i < 3; i++ {
		cmd := exec.Command(enqueue, "-policy", policy, "-redis", redisURL, "-tenant", "limited", "-type", "sluice.http",
			"-downstream", "api", "-payload", fmt.Sprintf(`{"url":"%s/api/x"}`, fake.URL()))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("limited job %d: %v\n%s", i, err, out)
		}
		accepted++
	}
	cmd := exec.Command(enqueue, "-policy", policy, "-redis", redisURL, "-tenant", "limited", "-type", "sluice.http", "-downstream", "api",
		"-payload", fmt.Sprintf(`{"url":"%s/api/x"}`, fake.URL()))
	out, err = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 3 || !strings.Contains(string(out), "rate limited") {
		t.Fatalf("the fourth limited job: exit %d (%v), %s; want exit 3 saying rate limited", code, err, out)
	}
	resp, err := http.Post("http://"+httpAddr+"/enqueue", "application/json", strings.NewReader(fmt.Sprintf(`{"tenant":"limited","type":"sluice.http","downstream":"api","payload":{"url":"%s/api/x"}}`, fake.URL())))
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("RateLimit") == "" ||
		resp.Header.Get("RateLimit-Policy") != `"tenant";q=3;w=3600` || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("POST /enqueue over the limit: %d %v %v", resp.StatusCode, resp.Header, body)
	}

	// Every accepted job reaches the downstream.
	started := time.Now()
	defer func() { t.Logf("%d jobs drained in %v", accepted, time.Since(started)) }()
	waitUntil := time.Now().Add(time.Duration(accepted/quota+20) * time.Second)
	for fake.Counts().Total < accepted {
		if time.Now().After(waitUntil) {
			t.Fatalf("%d of %d jobs reached the downstream", fake.Counts().Total, accepted)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // any duplicate would arrive now
	c := fake.Counts()
	if c.Total != accepted || c.Limited != 0 {
		t.Fatalf("downstream saw %d calls (%d refused with 429); want exactly %d, none refused", c.Total, c.Limited, accepted)
	}
	// The pace: never more than the quota in any second (plus the fake
	// server's tolerance of 3 early calls).
	arr := fake.Arrivals()
	most, j := 0, 0
	for i := range arr {
		for arr[j].Before(arr[i].Add(-time.Second)) || arr[j].Equal(arr[i].Add(-time.Second)) {
			j++
		}
		most = max(most, i-j+1)
	}
	if most > quota+3 {
		t.Fatalf("%d calls in one second; quota %d", most, quota)
	}
}
