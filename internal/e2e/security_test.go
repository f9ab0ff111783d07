package e2e

// Security: the worker and the producer CLI against a Redis that wants a
// password (requirepass) and one that speaks only TLS; the HTTP endpoints'
// default address; and secrets (Redis password, URL credentials, tokens,
// headers, bodies) kept out of the worker's logs and metrics.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
)

// secEnv is the test's environment without sluice's own variables, so
// that a developer's SLUICE_REDIS_URL or SLUICE_LISTEN cannot change what
// a test runs, plus extra.
func secEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLUICE_REDIS_URL=") || strings.HasPrefix(kv, "SLUICE_REDIS_CLUSTER=") ||
			strings.HasPrefix(kv, "SLUICE_LISTEN=") || strings.HasPrefix(kv, "SLUICE_POLICY=") || strings.HasPrefix(kv, "SSL_CERT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// secWorker is a running worker process.
type secWorker struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	addr string // its HTTP endpoints
	done chan struct{}
}

// secStartWorker starts the worker binary with args (and -listen on a free
// loopback port unless args has one), stopped with SIGTERM when the test
// ends.
func secStartWorker(t *testing.T, env []string, args ...string) *secWorker {
	t.Helper()
	bin, _ := binaries(t)
	w := &secWorker{logs: &syncBuffer{}, done: make(chan struct{})}
	hasListen := false
	for _, a := range args {
		hasListen = hasListen || a == "-listen"
	}
	if !hasListen {
		w.addr = freeAddr(t)
		args = append(args, "-listen", w.addr)
	}
	w.cmd = exec.Command(bin, args...)
	w.cmd.Env = env
	w.cmd.Stdout, w.cmd.Stderr = w.logs, w.logs
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		w.stop(t)
		if t.Failed() {
			t.Logf("worker %v:\n%s", args, w.logs.String())
		}
	})
	return w
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 15 s).
func (w *secWorker) stop(t *testing.T) {
	select {
	case <-w.done:
		return
	default:
	}
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(15 * time.Second):
		t.Errorf("worker did not stop 15s after SIGTERM; killing it")
		w.cmd.Process.Kill()
		<-w.done
	}
}

// waitHealthy polls /healthz until it answers 200, the worker exits, or
// 20 s pass.
func (w *secWorker) waitHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-w.done:
			t.Fatalf("worker exited (%v) before it was healthy:\n%s", w.cmd.ProcessState, w.logs.String())
		default:
		}
		resp, err := http.Get("http://" + w.addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker not healthy after 20s (%v):\n%s", err, w.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// secRun runs a command that is expected to exit by itself within
// 30 s, and returns its exit code and combined output.
func secRun(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not exit within 30s:\n%s", filepath.Base(bin), args, out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// secDownstream is a downstream on loopback that answers every request
// with status and counts the requests and the bodies it got.
type secDownstream struct {
	*httptest.Server
	calls  atomic.Int64
	mu     sync.Mutex
	bodies []string
}

func newSecDownstream(t *testing.T, status int) *secDownstream {
	r := &secDownstream{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, string(b))
		r.mu.Unlock()
		r.calls.Add(1)
		w.WriteHeader(status)
		fmt.Fprintln(w, "answer of the test downstream")
	}))
	t.Cleanup(r.Close)
	return r
}

// secClosedAddr returns a loopback address where nothing listens.
func secClosedAddr(t *testing.T) string { return freeAddr(t) }

// secPolicy writes a policy file with one downstream per name → base URL.
func secPolicy(t *testing.T, queueName string, downstreams map[string]string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "queue:\n  name: %s\n  bound: 1000\n", queueName)
	if len(downstreams) > 0 {
		b.WriteString("downstreams:\n")
		for name, base := range downstreams {
			fmt.Fprintf(&b, "  %s:\n    base_url: %s\n    rate: 100\n    per: 1s\n    max_wait: 2s\n    timeout: 5s\n", name, base)
		}
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// secPost POSTs a job to a worker's /enqueue and requires 202.
func secPost(t *testing.T, addr string, job map[string]any) {
	t.Helper()
	body, _ := json.Marshal(job)
	resp, err := http.Post("http://"+addr+"/enqueue", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /enqueue %s: %d %s", body, resp.StatusCode, out)
	}
}

// secWaitCalls waits until the downstream has had n calls.
func secWaitCalls(t *testing.T, d *secDownstream, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for d.calls.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the downstream had %d of %d calls after 20s", d.calls.Load(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSecurityRedisPassword: against a redis-server with requirepass, the worker
// and the producer CLI work with the password in the URL, and fail with
// exit 1 and a clear message without it, with a wrong one, or when Redis
// is unreachable; the password never appears in their output.
func TestSecurityRedisPassword(t *testing.T) {
	const pass = "s3cret-pass-Jq7Z"
	srv := redistest.Start(t, redistest.Config{Password: pass})
	worker, enqueue := binaries(t)
	api := newSecDownstream(t, http.StatusOK)
	policy := secPolicy(t, "auth", map[string]string{"api": api.URL + "/api/"})
	env := secEnv()
	good := "redis://:" + pass + "@" + srv.Addr() + "/0"

	w := secStartWorker(t, env, "-policy", policy, "-redis", good, "-concurrency", "2")
	w.waitHealthy(t)
	secPost(t, w.addr, map[string]any{"tenant": "acme", "type": "sluice.http", "downstream": "api", "payload": map[string]any{"url": api.URL + "/api/a"}})
	code, out := secRun(t, enqueue, env, "-policy", policy, "-redis", good, "-tenant", "acme", "-type", "sluice.http",
		"-downstream", "api", "-payload", `{"url":"`+api.URL+`/api/b"}`)
	if code != 0 {
		t.Fatalf("enqueue with the password: exit %d\n%s", code, out)
	}
	secWaitCalls(t, api, 2)

	for _, c := range []struct {
		name, url string
		want      *regexp.Regexp
	}{
		{"no password", "redis://" + srv.Addr() + "/0", regexp.MustCompile(`(?i)NOAUTH|authentication required|unauthenticated`)},
		{"wrong password", "redis://:wrong-" + pass + "@" + srv.Addr() + "/0", regexp.MustCompile(`(?i)WRONGPASS|invalid username-password`)},
		{"unreachable", "redis://:" + pass + "@" + secClosedAddr(t) + "/0", regexp.MustCompile(`connection refused`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := secRun(t, worker, env, "-policy", policy, "-redis", c.url, "-listen", freeAddr(t))
			if code != 1 || !c.want.MatchString(out) {
				t.Errorf("worker: exit %d, output:\n%s\nwant exit 1 matching %v", code, out, c.want)
			}
			if strings.Contains(out, pass) {
				t.Errorf("worker output shows the password:\n%s", out)
			}
			code, out = secRun(t, enqueue, env, "-policy", policy, "-redis", c.url, "-tenant", "acme", "-type", "x")
			if code != 1 || !c.want.MatchString(out) {
				t.Errorf("enqueue: exit %d, output:\n%s\nwant exit 1 matching %v", code, out, c.want)
			}
			if strings.Contains(out, pass) {
				t.Errorf("enqueue output shows the password:\n%s", out)
			}
		})
	}
	if strings.Contains(w.logs.String(), pass) {
		t.Errorf("the running worker's log shows the password:\n%s", w.logs.String())
	}
}

// TestSecurityRedisURLParseErrorHidesPassword: a -redis URL that does not parse
// must be refused without printing it: it holds the password. That
// includes a password with a "/", "?" or "#", which net/url takes for
// the end of the host and then quotes as a bad port (issue 19, finding 5).
func TestSecurityRedisURLParseErrorHidesPassword(t *testing.T) {
	worker, enqueue := binaries(t)
	policy := secPolicy(t, "parse", nil)
	const pass = "Pw-in-a-bad-url-9x"
	env := secEnv()
	for _, bad := range []string{
		"redis://:" + pass + "@127.0.0.1:63x79/0",  // not a port
		"redis://:" + pass + "/x@127.0.0.1:6393/0", // a "/" in the password
		"redis://:" + pass + "?x@127.0.0.1:6393/0",
		"redis://:" + pass + "#x@127.0.0.1:6393/0",
	} {
		wcode, wout := secRun(t, worker, env, "-policy", policy, "-redis", bad, "-listen", freeAddr(t))
		ecode, eout := secRun(t, enqueue, env, "-policy", policy, "-redis", bad, "-tenant", "acme", "-type", "x")
		if wcode == 0 || ecode == 0 {
			t.Fatalf("a bad URL was accepted: worker exit %d, enqueue exit %d", wcode, ecode)
		}
		var leaks []string
		if strings.Contains(wout, pass) {
			leaks = append(leaks, "worker: "+strings.TrimSpace(wout))
		}
		if strings.Contains(eout, pass) {
			leaks = append(leaks, "enqueue: "+strings.TrimSpace(eout))
		}
		if len(leaks) > 0 {
			t.Fatalf("a -redis URL that does not parse is printed with its password:\n%s", strings.Join(leaks, "\n"))
		}
		for _, out := range []string{wout, eout} {
			if !strings.Contains(out, "does not parse") {
				t.Errorf("want an error that says the URL does not parse; got:\n%s", out)
			}
		}
	}
}

// TestSecurityListenLoopbackByDefault: the HTTP endpoints (/enqueue included)
// listen on 127.0.0.1 unless told otherwise.
func TestSecurityListenLoopbackByDefault(t *testing.T) {
	worker, _ := binaries(t)
	env := secEnv()
	_, help := secRun(t, worker, env, "-h")
	if !regexp.MustCompile(`-listen string\n[^\n]*\(default "127\.0\.0\.1:9090"\)`).MatchString(help) {
		t.Fatalf("-h does not give -listen the default 127.0.0.1:9090:\n%s", help)
	}
	// Run it with no -listen when the default port is free here.
	l, err := net.Listen("tcp", "127.0.0.1:9090")
	if err != nil {
		t.Logf("127.0.0.1:9090 is taken on this machine (%v): checked the default in -h only", err)
		return
	}
	l.Close()
	srv := redistest.Start(t, redistest.Config{})
	policy := secPolicy(t, "listen", nil)
	cmd := exec.Command(worker, "-policy", policy, "-redis", "redis://"+srv.Addr()+"/0", "-concurrency", "1")
	cmd.Env = env
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), "sluice worker started") {
		select {
		case <-exited:
			if strings.Contains(logs.String(), "address already in use") {
				t.Logf("127.0.0.1:9090 was taken meanwhile: checked the default in -h only")
				return
			}
			t.Fatalf("worker exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker did not start:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "listen=127.0.0.1:9090") || strings.Contains(logs.String(), "beyond loopback") {
		t.Fatalf("worker with the default -listen:\n%s", logs.String())
	}
	resp, err := http.Get("http://127.0.0.1:9090/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET 127.0.0.1:9090/healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestSecuritySecretsStayOutOfLogsAndMetrics: jobs whose URL holds user:pass@, a
// token and a signature in the query, an Authorization header and a body
// marker fail three ways (refused URL, 404, network error); none of those
// secrets, nor the Redis password, nor the tenant id, appears in the
// worker's output or in /metrics, and asynq's stored error messages (what
// /monitoring/ shows) hold no token either.
func TestSecuritySecretsStayOutOfLogsAndMetrics(t *testing.T) {
	const (
		redisPass = "redis-Pass-4Kq"
		urlPass   = "url-Pass-8Wm"
		token     = "tok-3c9a1f77"
		token2    = "tok-UPPER-51b2"
		sig       = "sig-0d4e6b"
		header    = "hdr-Bearer-77aa"
		marker    = "BODY-MARKER-f00d"
		tenant    = "tenant-Mark-Zz9"
	)
	srv := redistest.Start(t, redistest.Config{Password: redisPass})
	api := newSecDownstream(t, http.StatusNotFound)
	dead := secClosedAddr(t)
	const qname = "secrets"
	policy := secPolicy(t, qname, map[string]string{"api": api.URL + "/api/", "dead": "http://" + dead + "/dead/"})
	w := secStartWorker(t, secEnv(), "-policy", policy, "-redis", "redis://:"+redisPass+"@"+srv.Addr()+"/0", "-concurrency", "2")
	w.waitHealthy(t)

	apiHost := strings.TrimPrefix(api.URL, "http://")
	// Refused at enqueue (400), before anything is stored: user info in
	// the URL. The refusal names the URL without its secrets.
	userinfo, _ := json.Marshal(map[string]any{
		"tenant": tenant, "type": "sluice.http", "downstream": "api", "max_retry": -1,
		"payload": map[string]any{"method": "POST", "url": "http://user:" + urlPass + "@" + apiHost + "/api/x?token=" + token, "body": marker,
			"header": map[string]string{"Authorization": "Bearer " + header}},
	})
	resp, err := http.Post("http://"+w.addr+"/enqueue", "application/json", bytes.NewReader(userinfo))
	if err != nil {
		t.Fatal(err)
	}
	refusal, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(refusal), "carries user info") {
		t.Fatalf("a URL with user info: %d %s; want 400 saying it carries user info", resp.StatusCode, refusal)
	}
	for _, secret := range []string{urlPass, token, marker, header} {
		if strings.Contains(string(refusal), secret) {
			t.Fatalf("the refusal %s quotes a secret", refusal)
		}
	}
	jobs := []map[string]any{
		// 404 from the API.
		{"url": api.URL + "/api/missing?token=" + token + "&sig=" + sig, "downstream": "api"},
		// Network error: nothing listens.
		{"url": "http://" + dead + "/dead/x?token=" + token + "&sig=" + sig, "downstream": "dead"},
		// Network error, the URL written with an upper-case scheme.
		{"url": "HTTP://" + dead + "/dead/y?token=" + token2, "downstream": "dead"},
	}
	for _, j := range jobs {
		secPost(t, w.addr, map[string]any{
			"tenant": tenant, "type": "sluice.http", "downstream": j["downstream"], "max_retry": -1,
			"payload": map[string]any{"method": "POST", "url": j["url"], "body": marker,
				"header": map[string]string{"Authorization": "Bearer " + header}},
		})
	}
	// All three end archived (no retries): poll asynq's archive.
	c := srv.Client(t)
	ctx := context.Background()
	archived := "asynq:{" + qname + "}:archived"
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := c.ZCard(ctx, archived).Result()
		if err == nil && n == int64(len(jobs)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs archived after 30s (%v):\n%s", n, len(jobs), err, w.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The 404 job did reach the API with its secrets: they were in play.
	api.mu.Lock()
	sawMarker := len(api.bodies) == 1 && api.bodies[0] == marker
	api.mu.Unlock()
	if !sawMarker || api.calls.Load() != 1 {
		t.Fatalf("the API had %d calls; want exactly the 404 job's, with its body", api.calls.Load())
	}

	resp, err = http.Get("http://" + w.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `sluice_downstream_responses_total{code="404",downstream="api"} 1`) {
		t.Errorf("/metrics lacks the 404 response; labels changed?\n%s", secGrep(string(metrics), "sluice_downstream"))
	}
	// Not a log, but worth knowing: asynqmon's API (under /monitoring/,
	// read-only) shows each task's payload, secrets included.
	if resp, err := http.Get("http://" + w.addr + "/monitoring/api/queues/" + qname + "/archived_tasks"); err == nil {
		var list struct {
			Tasks []struct {
				Payload string `json:"payload"`
			} `json:"tasks"`
		}
		json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		shown := 0
		for _, task := range list.Tasks {
			var j queue.Job
			if json.Unmarshal([]byte(task.Payload), &j) == nil && bytes.Contains(j.Payload, []byte(header)) {
				shown++
			}
		}
		t.Logf("GET /monitoring/api/queues/%s/archived_tasks: %d; %d of %d tasks show the Authorization header (base64 in the envelope)",
			qname, resp.StatusCode, shown, len(list.Tasks))
	}
	t0 := time.Now()
	w.stop(t) // flush everything it would log on the way out
	t.Logf("worker stopped in %v", time.Since(t0).Round(time.Millisecond))
	logs := w.logs.String()
	secrets := map[string]string{"the Redis password": redisPass, "the URL's password": urlPass, "the token": token,
		"the upper-case URL's token": token2, "the signature": sig, "the Authorization header": header, "the body": marker}
	for what, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("the worker's output shows %s (%q):\n%s", what, s, logs)
		}
		if strings.Contains(string(metrics), s) {
			t.Errorf("/metrics shows %s (%q)", what, s)
		}
	}
	if strings.Contains(string(metrics), tenant) {
		t.Errorf("/metrics has the tenant id as a label:\n%s", secGrep(string(metrics), tenant))
	}
	// asynq keeps each archived task's last error; asynqmon (/monitoring/)
	// shows it. The payload there holds the secrets anyway (it is the job),
	// but the error text must not add more: check it names no token.
	ins := asynq.NewInspectorFromRedisClient(c)
	tasks, err := ins.ListArchivedTasks(qname)
	if err != nil || len(tasks) != len(jobs) {
		t.Fatalf("asynq lists %d archived tasks (%v); want %d", len(tasks), err, len(jobs))
	}
	for _, task := range tasks {
		msg := task.LastErr
		t.Logf("archived %s: %s", task.ID, msg)
		if msg == "" {
			t.Errorf("archived task %s has no error message", task.ID)
		}
		for what, s := range secrets {
			if strings.Contains(msg, s) {
				t.Errorf("asynq's error message of %s shows %s: %s", task.ID, what, msg)
			}
		}
	}
}

func secGrep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// secTLSFiles are a CA and a server certificate for 127.0.0.1 signed by it.
type secTLSFiles struct {
	ca, cert, key string
	pool          *x509.CertPool
}

// secMakeTLS generates a self-signed CA and a server certificate for
// 127.0.0.1 and localhost into dir.
func secMakeTLS(t *testing.T, dir string) secTLSFiles {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	f := secTLSFiles{ca: filepath.Join(dir, "ca.pem"), cert: filepath.Join(dir, "server.pem"), key: filepath.Join(dir, "server.key"), pool: x509.NewCertPool()}
	for path, block := range map[string]*pem.Block{
		f.ca:   {Type: "CERTIFICATE", Bytes: caDER},
		f.cert: {Type: "CERTIFICATE", Bytes: srvDER},
		f.key:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.pool.AddCert(caCert)
	return f
}

// secRedisBin is the redis-server that redistest runs.
func secRedisBin(t *testing.T) string {
	t.Helper()
	redistest.Require(t)
	name := "redis-server"
	if v := os.Getenv(redistest.EnvServer); v != "" {
		name = v
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// secTLSRedis starts a redis-server that listens only for TLS
// (--port 0 --tls-port N) on 127.0.0.1, with requirepass, and stops it
// when the test ends. It skips the test when this redis-server was built
// without TLS. redistest owns --port, so this one is started here.
func secTLSRedis(t *testing.T, files secTLSFiles, pass string) string {
	t.Helper()
	bin := secRedisBin(t)
	dir := t.TempDir()
	for attempt := 0; attempt < 5; attempt++ {
		addr := freeAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", attempt))
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "--port", "0", "--tls-port", port, "--bind", "127.0.0.1",
			"--tls-cert-file", files.cert, "--tls-key-file", files.key, "--tls-ca-cert-file", files.ca,
			"--tls-auth-clients", "no", "--requirepass", pass,
			"--dir", dir, "--daemonize", "no", "--save", "", "--appendonly", "no", "--logfile", "")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := cmd.Start(); err != nil {
			logf.Close()
			t.Fatal(err)
		}
		logf.Close()
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-exited
			}
		}
		c := redis.NewClient(&redis.Options{Addr: addr, Password: pass, MaxRetries: -1, DialTimeout: 300 * time.Millisecond, DialerRetries: 1,
			TLSConfig: &tls.Config{RootCAs: files.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
		deadline := time.Now().Add(10 * time.Second)
		var perr error
		for {
			select {
			case <-exited:
				c.Close()
				log, _ := os.ReadFile(logPath)
				switch {
				case bytes.Contains(log, []byte("already in use")):
					perr = errors.New("port taken")
				case bytes.Contains(log, []byte("Bad directive")) || bytes.Contains(log, []byte("(tls)")) ||
					bytes.Contains(log, []byte("TLS")) && bytes.Contains(log, []byte("not")):
					t.Skipf("this redis-server (%s) cannot serve TLS; skipping the TLS test. Its log:\n%s", bin, log)
				default:
					t.Fatalf("TLS redis-server exited while starting; its log:\n%s", log)
				}
			default:
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				perr = c.Ping(ctx).Err()
				cancel()
				if perr == nil {
					c.Close()
					t.Cleanup(stop)
					return addr
				}
				if time.Now().After(deadline) {
					c.Close()
					stop()
					log, _ := os.ReadFile(logPath)
					t.Fatalf("TLS redis-server on %s did not answer within 10s (%v); its log:\n%s", addr, perr, log)
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			break // exited on a taken port: try another
		}
	}
	t.Fatal("no free port for the TLS redis-server after 5 attempts")
	return ""
}

// TestSecurityRedisTLS: a redis-server that speaks only TLS and wants a password.
// Plain-text clients and clients that do not trust its CA are refused.
// With the CA, go-redis drives queue.Producer and queue.Server end to end;
// and the worker and enqueue binaries, given rediss:// and the CA
// (-redis-ca, or SLUICE_REDIS_CA), run jobs; without the CA the worker
// exits 1 saying why.
func TestSecurityRedisTLS(t *testing.T) {
	const pass = "tls-Pass-2Rv"
	files := secMakeTLS(t, t.TempDir())
	addr := secTLSRedis(t, files, pass)
	ctx := context.Background()
	tlsConf := func() *tls.Config {
		return &tls.Config{RootCAs: files.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	}

	t.Run("refused without TLS or without the CA", func(t *testing.T) {
		plain := redis.NewClient(&redis.Options{Addr: addr, Password: pass, MaxRetries: -1, DialerRetries: 1, ReadTimeout: 2 * time.Second})
		defer plain.Close()
		if err := plain.Ping(ctx).Err(); err == nil {
			t.Fatal("a plain-text client was answered by the TLS-only server")
		}
		untrusted := redis.NewClient(&redis.Options{Addr: addr, Password: pass, MaxRetries: -1, DialerRetries: 1,
			TLSConfig: &tls.Config{ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}})
		defer untrusted.Close()
		err := untrusted.Ping(ctx).Err()
		var ua x509.UnknownAuthorityError
		if err == nil || !(errors.As(err, &ua) || strings.Contains(err.Error(), "unknown authority")) {
			t.Fatalf("a client without the CA: %v; want unknown authority", err)
		}
		nopass := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, TLSConfig: tlsConf()})
		defer nopass.Close()
		if err := nopass.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("a TLS client without the password: %v; want NOAUTH", err)
		}
	})

	t.Run("library", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: pass, TLSConfig: tlsConf()})
		defer c.Close()
		cfg := queue.Config{Queue: "tls-lib", Bound: 1000}
		p, err := queue.NewProducer(c, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		const jobs = 40
		want := map[string]bool{}
		for i := range jobs {
			r, err := p.Enqueue(ctx, queue.Job{Tenant: fmt.Sprintf("t%d", i%4), Type: "noop", Payload: []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatal(err)
			}
			want[r.ID] = true
		}
		var mu sync.Mutex
		ran := map[string]int{}
		all := make(chan struct{})
		s, err := queue.NewServer(c, &queue.ServerConfig{Queue: cfg.Queue, Prefix: cfg.Prefix, Shards: cfg.Shards, Concurrency: 4, PollInterval: 10 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(queue.HandlerFunc(func(_ context.Context, j *queue.Job) error {
			mu.Lock()
			defer mu.Unlock()
			ran[j.ID]++
			if len(ran) == jobs {
				select {
				case <-all:
				default:
					close(all)
				}
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
		select {
		case <-all:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d jobs ran over TLS in 30s", len(ran), jobs)
		}
		mu.Lock()
		for id := range want {
			if ran[id] != 1 {
				t.Errorf("job %s ran %d times", id, ran[id])
			}
		}
		mu.Unlock()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := p.Stats(ctx)
			if err == nil && st.Depth == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("depth after the drain: %+v %v", st, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("worker", func(t *testing.T) {
		worker, enqueue := binaries(t)
		api := newSecDownstream(t, http.StatusOK)
		policy := secPolicy(t, "tls-worker", map[string]string{"api": api.URL + "/api/"})
		url := "rediss://:" + pass + "@" + addr + "/0"

		// Without the CA: a clear refusal, exit 1, no password shown.
		code, out := secRun(t, worker, secEnv(), "-policy", policy, "-redis", url, "-listen", freeAddr(t))
		if code != 1 || !strings.Contains(out, "certificate signed by unknown authority") || strings.Contains(out, pass) {
			t.Fatalf("worker without the CA: exit %d:\n%s\nwant exit 1 naming the unknown authority", code, out)
		}
		// The CA by flag for the worker, by environment for the CLI.
		w := secStartWorker(t, secEnv(), "-policy", policy, "-redis", url, "-redis-ca", files.ca, "-concurrency", "2")
		w.waitHealthy(t)
		secPost(t, w.addr, map[string]any{"tenant": "acme", "type": "sluice.http", "downstream": "api", "payload": map[string]any{"url": api.URL + "/api/over-tls"}})
		env := secEnv("SLUICE_REDIS_CA=" + files.ca)
		code, out = secRun(t, enqueue, env, "-policy", policy, "-redis", url, "-tenant", "acme", "-type", "sluice.http",
			"-downstream", "api", "-payload", `{"url":"`+api.URL+`/api/cli-over-tls"}`)
		if code != 0 {
			t.Fatalf("enqueue over TLS: exit %d\n%s", code, out)
		}
		secWaitCalls(t, api, 2)
		// A plain redis:// URL on the TLS port fails, clearly; so does a CA
		// given for a URL that is not rediss://.
		code, out = secRun(t, worker, secEnv(), "-policy", policy, "-redis", "redis://:"+pass+"@"+addr+"/0", "-listen", freeAddr(t))
		if code != 1 || !strings.Contains(out, "connecting to Redis") {
			t.Fatalf("worker with redis:// on the TLS port: exit %d:\n%s", code, out)
		}
		code, out = secRun(t, worker, secEnv(), "-policy", policy, "-redis", "redis://:"+pass+"@"+addr+"/0", "-redis-ca", files.ca, "-listen", freeAddr(t))
		if code == 0 || !strings.Contains(out, "-redis-ca is set but -redis is not a rediss:// URL") || strings.Contains(out, pass) {
			t.Fatalf("worker with -redis-ca and redis://: exit %d:\n%s", code, out)
		}
		if strings.Contains(w.logs.String(), pass) {
			t.Fatalf("the worker's log shows the password:\n%s", w.logs.String())
		}
	})
}
